package wechat

import (
	"net/http"

	"github.com/silenceper/wechat/v2/util"
)

// Use makes every call of the SDK in this process go through rt. Call it
// before the SDK's first call: util.DefaultHTTPClient is a plain variable,
// read without synchronisation.
func Use(rt http.RoundTripper) {
	util.DefaultHTTPClient = &http.Client{Transport: rt}
}
