package apps

import (
	"net/http"

	"github.com/quotaware/throttle/internal/tokenform"
)

// bodyToken reads the access_token form field of a DingTalk old-API call
// (documented as a query parameter or, for some calls, a form field).
func bodyToken(req *http.Request, provider string) string {
	if provider != nameDingTalk {
		return ""
	}
	return tokenform.FormBody(req)
}
