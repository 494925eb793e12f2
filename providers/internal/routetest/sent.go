package routetest

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/quotaware/throttle/providers"
)

// RoutesAsSent checks that p matches and routes every request net/http
// sends as it sends (method, target) as it routes that plain request,
// though their URL.Path does not say so: Path changed after parsing,
// leaving a stale RawPath that net/http ignores, and the path in Opaque,
// with or without "//host" (the net/url idiom for a path sent as written),
// which net/http sends in place of Path. It returns the plain request's
// route.
func RoutesAsSent(t *testing.T, p providers.Profile, method, target string) providers.Route {
	t.Helper()
	plain := newRequest(t, method, target)
	if !p.Match(plain) {
		t.Fatalf("%s not matched", target)
	}
	want, err := p.Route(plain)
	if err != nil {
		t.Fatal(err)
	}
	host, path := plain.URL.Host, plain.URL.Path
	stale := newRequest(t, method, target)
	stale.URL.RawPath = "/base%2Fx" // as url.Parse leaves it for "/base%2Fx"
	opaque := newRequest(t, method, target)
	opaque.URL.Path, opaque.URL.Opaque = "", "//"+host+path
	hostless := newRequest(t, method, target)
	hostless.URL.Path, hostless.URL.Opaque = "", path
	for name, req := range map[string]*http.Request{"stale RawPath": stale, "Opaque": opaque, "Opaque without the host": hostless} {
		if got := req.URL.RequestURI(); got != plain.URL.RequestURI() && got != "https://"+host+plain.URL.RequestURI() {
			t.Fatalf("%s: net/http sends %q, not %q", name, got, plain.URL.RequestURI())
		}
		if !p.Match(req) {
			t.Errorf("%s, %s: not matched", target, name)
			continue
		}
		got, err := p.Route(req)
		if err != nil || limits(got) != limits(want) {
			t.Errorf("%s, %s: routed %s, %v\nwant %s", target, name, limits(got), err, limits(want))
		}
	}
	return want
}

// limits is what a route limits: its API, rules and scopes.
func limits(r providers.Route) string {
	var rules []string
	for _, rl := range r.Rules {
		rules = append(rules, rl.String())
	}
	return fmt.Sprintf("%s uncatalogued=%v rules=%q scopes=%q", r.API, r.Uncatalogued, rules, r.Scopes)
}

func newRequest(t *testing.T, method, target string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, target, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}
