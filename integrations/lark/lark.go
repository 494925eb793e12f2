package lark

import (
	"net/http"

	sdk "github.com/larksuite/oapi-sdk-go/v3"
	"github.com/quotaware/throttle/integrations/internal/checkrt"
)

// NewClient returns a Feishu / Lark client whose calls go through rt, with
// any further options of the SDK. It panics when rt is nil.
func NewClient(appID, appSecret string, rt http.RoundTripper, opts ...sdk.ClientOptionFunc) *sdk.Client {
	return sdk.NewClient(appID, appSecret, append(opts, sdk.WithHttpClient(&http.Client{Transport: checkrt.Transport("lark.NewClient", rt)}))...)
}
