package dingtalk_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/quotaware/throttle/limiter/rule"
	"github.com/quotaware/throttle/providers"
	"github.com/quotaware/throttle/providers/dingtalk"
)

// Keys built from arbitrary request paths stay bounded, and two paths that
// fold to different APIs never share a rule key or a penalty scope.
func FuzzRouteKeys(f *testing.F) {
	f.Add("/topapi/v2/user/get", "/topapi/v2/user/list")
	f.Add("/v1.0/contact/users/manager4220", "/v1.0/contact/users/manager4220/departments")
	f.Add("/a/"+string(make([]byte, 600)), "/a/"+string(make([]byte, 601)))
	p := dingtalk.MustNew(dingtalk.Config{Apps: []dingtalk.App{{AppKey: "dingfuzz"}}}).Profile()
	f.Fuzz(func(t *testing.T, a, b string) {
		ra, okA := route(t, p, a)
		rb, okB := route(t, p, b)
		if !okA || !okB {
			return
		}
		for _, r := range [][]string{keys(ra), keys(rb), ra.Scopes, rb.Scopes} {
			for _, k := range r {
				if len(k) > rule.MaxKeyLen {
					t.Fatalf("key of %d bytes: %q", len(k), k)
				}
			}
		}
		if ra.API == rb.API {
			return
		}
		// The first rule and scope are the per-API ones.
		if keys(ra)[0] == keys(rb)[0] || ra.Scopes[0] == rb.Scopes[0] {
			t.Fatalf("APIs %q and %q share key %q / scope %q", ra.API, rb.API, keys(ra)[0], ra.Scopes[0])
		}
	})
}

func route(t *testing.T, p providers.Profile, path string) (providers.Route, bool) {
	u := &url.URL{Scheme: "https", Host: "api.dingtalk.com", Path: path}
	req := &http.Request{Method: http.MethodGet, URL: u, Host: u.Host, Header: http.Header{}}
	if !p.Match(req) {
		return providers.Route{}, false
	}
	r, err := p.Route(req)
	if err != nil {
		return providers.Route{}, false
	}
	if len(r.Rules) == 0 || len(r.Scopes) == 0 {
		t.Fatalf("route of %q has no rules or scopes", path)
	}
	return r, true
}

func keys(r providers.Route) []string {
	out := make([]string, len(r.Rules))
	for i, rl := range r.Rules {
		out[i] = rl.Key()
	}
	return out
}
