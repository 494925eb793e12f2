package workwx

import (
	"net/http"

	sdk "github.com/xen0n/go-workwx"
)

// New returns a WeCom client of the company corpID whose calls go through
// rt, with any further options of the SDK.
func New(corpID string, rt http.RoundTripper, opts ...sdk.CtorOption) *sdk.Workwx {
	return sdk.New(corpID, append(opts, sdk.WithHTTPClient(&http.Client{Transport: rt}))...)
}
