package dingtalk

import (
	"net/http"

	"github.com/quotaware/throttle/providers"
)

// routedClassify classifies an answer as the Transport does: with the route
// the profile gave the request.
func routedClassify(p providers.Profile, req *http.Request, resp *http.Response) providers.Verdict {
	route, err := p.Route(req)
	if err != nil {
		panic(err)
	}
	return p.Classify(req, resp, &route)
}
