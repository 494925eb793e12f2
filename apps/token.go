package apps

import (
	"net/http"
	"strings"

	"github.com/quotaware/throttle/internal/tokenform"
	"github.com/quotaware/throttle/providers"
)

// maxFormPeek bounds what Resolve reads of a form body for its token: the
// field is documented among a call's first few.
const maxFormPeek = 4 << 10

// bodyToken reads the access_token form field of a DingTalk old-API call
// (documented as a query parameter or, for some calls, a form field), from
// a bounded prefix of the body, leaving the body as it was.
func bodyToken(req *http.Request, provider string) string {
	if provider != nameDingTalk || req.Body == nil || req.Body == http.NoBody ||
		!strings.HasPrefix(strings.ToLower(tokenform.Header(req.Header, "Content-Type")), "application/x-www-form-urlencoded") {
		return ""
	}
	prefix, _ := providers.PeekRequestBody(req, maxFormPeek)
	return tokenform.QueryValue(string(prefix), "access_token")
}
