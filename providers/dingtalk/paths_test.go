package dingtalk

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/quotaware/throttle/providers"
)

// An App.APIs entry is compared with a request's path as DingTalk reads
// it ("." and ".." resolved, escapes decoded): an entry written otherwise
// named no request, its API's rules applying to nothing. New refuses it,
// naming the field and the entry.
func TestAPIsWrittenAsNoRequestIsRead(t *testing.T) {
	for api, want := range map[string]string{
		"GET /v1.0/./contact/things/{id}": `"." or ".." segment: write "/v1.0/contact/things/{id}"`,
		"/topapi/x/../brand/new":          `"." or ".." segment: write "/topapi/brand/new"`,
		"/topapi/brand/new/.":             `"." or ".." segment: write "/topapi/brand/new"`,
		"/topapi//brand/new":              `empty segment: write "/topapi/brand/new"`,
		"/topapi/brand/%6Eew":             "'%'",
		"GET /v1.0/things/a%2Fb":          "'%'",
	} {
		_, err := New(Config{Apps: []App{{AppKey: "dingapp", APIs: []string{"/topapi/fine", api}}}})
		if err == nil || !strings.Contains(err.Error(), "App.APIs") || !strings.Contains(err.Error(), fmt.Sprintf("%q", api)) ||
			!strings.Contains(err.Error(), want) {
			t.Errorf("APIs %q: %v, want an error naming App.APIs and the entry, saying %s", api, err, want)
		}
	}
	if _, err := New(Config{Apps: []App{{AppKey: "dingapp", APIs: []string{"/topapi/brand/new/", "GET /v1.0/a.b/..c/{id}"}}}}); err != nil {
		t.Errorf("plain entries: %v", err)
	}
}

// sentAlike returns requests that net/http sends as it sends target's
// (method, URL), though their URL.Path does not say so: Path changed after
// parsing, leaving a stale RawPath that net/http ignores, and the path in
// Opaque, with or without "//host" (the net/url idiom for a path sent as
// written), which net/http sends in place of Path.
func sentAlike(t *testing.T, method, target string) map[string]*http.Request {
	t.Helper()
	plain := request(method, target)
	host, path := plain.URL.Host, plain.URL.Path
	stale := request(method, target)
	stale.URL.RawPath = "/base%2Fx" // as url.Parse leaves it for "/base%2Fx"
	opaque := request(method, target)
	opaque.URL.Path, opaque.URL.Opaque = "", "//"+host+path
	hostless := request(method, target)
	hostless.URL.Path, hostless.URL.Opaque = "", path
	reqs := map[string]*http.Request{"stale RawPath": stale, "Opaque": opaque, "Opaque without the host": hostless}
	for name, r := range reqs {
		if got := r.URL.RequestURI(); got != plain.URL.RequestURI() && got != "https://"+host+plain.URL.RequestURI() {
			t.Fatalf("%s: net/http sends %q, not %q", name, got, plain.URL.RequestURI())
		}
	}
	return reqs
}

// routeString is what a route limits: its API, rules and scopes.
func routeString(r providers.Route) string {
	var rules []string
	for _, rl := range r.Rules {
		rules = append(rules, rl.String())
	}
	return fmt.Sprintf("%s uncatalogued=%v rules=%q scopes=%q", r.API, r.Uncatalogued, rules, r.Scopes)
}

// A request is routed by the path net/http sends: a stale RawPath or a
// path in Opaque routed a catalogued API as uncatalogued.
func TestRouteReadsThePathAsSent(t *testing.T) {
	p := testProfile(t, Config{Apps: []App{{APIs: []string{"/topapi/brand/new"}}}})
	for _, tc := range []struct{ method, target string }{
		{"POST", topURL},
		{"GET", oldURL},
		{"GET", "https://api.dingtalk.com/v1.0/contact/users/zhangsan"},
		{"POST", "https://oapi.dingtalk.com/topapi/brand/new?access_token=tok"},
		{"GET", "https://api.dingtalk.com/v9.9/not/catalogued"},
	} {
		want, err := p.Route(request(tc.method, tc.target))
		if err != nil {
			t.Fatal(err)
		}
		for name, req := range sentAlike(t, tc.method, tc.target) {
			if !p.Match(req) {
				t.Errorf("%s, %s: not matched", tc.target, name)
				continue
			}
			got, err := p.Route(req)
			if err != nil || routeString(got) != routeString(want) {
				t.Errorf("%s, %s: routed %s, %v\nwant %s", tc.target, name, routeString(got), err, routeString(want))
			}
		}
	}
}
