package godingtalk

import (
	"net/http"
	"time"

	sdk "github.com/hugozhu/godingtalk"
	"github.com/quotaware/throttle/integrations/internal/checkrt"
)

// NewClient returns a godingtalk client whose calls go through rt, with its
// access token cached in memory (the SDK's default, a file in the working
// directory, does not suit several replicas). It panics when rt is nil.
func NewClient(corpID, corpSecret string, rt http.RoundTripper) *sdk.DingTalkClient {
	c := sdk.NewDingTalkClient(corpID, corpSecret)
	c.HTTPClient = &http.Client{Transport: checkrt.Transport("godingtalk.NewClient", rt), Timeout: 30 * time.Second}
	c.Cache = sdk.NewInMemoryCache()
	return c
}
