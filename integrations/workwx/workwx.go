package workwx

import (
	"net/http"

	"github.com/quotaware/throttle/integrations/internal/checkrt"
	sdk "github.com/xen0n/go-workwx"
)

// New returns a WeCom client of the company corpID whose calls go through
// rt, with any further options of the SDK. It panics when rt is nil.
func New(corpID string, rt http.RoundTripper, opts ...sdk.CtorOption) *sdk.Workwx {
	return sdk.New(corpID, append(opts, sdk.WithHTTPClient(&http.Client{Transport: checkrt.Transport("workwx.New", rt)}))...)
}
