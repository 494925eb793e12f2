package wechat

import (
	"net/http"

	"github.com/quotaware/throttle/integrations/internal/checkrt"
	"github.com/silenceper/wechat/v2/util"
)

// Use makes every call of the SDK in this process go through rt. Call it
// before the SDK's first call: util.DefaultHTTPClient is a plain variable,
// read without synchronisation. It panics when rt is nil.
func Use(rt http.RoundTripper) {
	checkrt.Transport("wechat.Use", rt)
	util.DefaultHTTPClient = &http.Client{Transport: rt}
}
