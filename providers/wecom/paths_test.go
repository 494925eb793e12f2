package wecom

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quotaware/throttle/providers"
)

// A Config.APIs entry is compared with a request's path as WeCom reads it
// ("." and ".." resolved, escapes decoded): an entry written otherwise
// named no request. New refuses it, naming the field and the entry.
func TestAPIsWrittenAsNoRequestIsRead(t *testing.T) {
	for api, want := range map[string]string{
		"/cgi-bin/./brand/new":     `"." or ".." segment: write "/cgi-bin/brand/new"`,
		"/cgi-bin/x/../brand/new":  `"." or ".." segment: write "/cgi-bin/brand/new"`,
		"/cgi-bin/brand/new/..":    `"." or ".." segment: write "/cgi-bin/brand"`,
		"/cgi-bin//brand/new":      `empty segment: write "/cgi-bin/brand/new"`,
		"/cgi-bin/brand/%6Eew":     "'%'",
		"/cgi-bin/brand/new%2Fold": "'%'",
	} {
		_, err := New(Config{APIs: []string{"/cgi-bin/fine", api}, Apps: []App{{CorpID: "ww1"}}})
		field := fmt.Sprintf("Config.APIs[1]: want an API path such as /cgi-bin/user/get, got %q", api)
		if err == nil || !strings.Contains(err.Error(), field) || !strings.Contains(err.Error(), want) {
			t.Errorf("APIs %q: %v, want an error saying %q and %s", api, err, field, want)
		}
	}
	if _, err := New(Config{APIs: []string{"/cgi-bin/brand/new/", "/cgi-bin/a.b/..c"}, Apps: []App{{CorpID: "ww1"}}}); err != nil {
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
	p := testProfile(t, Config{APIs: []string{"/cgi-bin/brand/new"}, Apps: []App{{}}}, &fakeClock{t: time.Unix(1741581296, 0)})
	for _, tc := range []struct{ method, target string }{
		{"GET", "https://qyapi.weixin.qq.com/cgi-bin/user/get?access_token=T&userid=zhangsan"},
		{"POST", "https://qyapi.weixin.qq.com/cgi-bin/brand/new?access_token=T"},
		{"GET", "https://qyapi.weixin.qq.com/cgi-bin/media/get/zhangsan"},
	} {
		want, err := p.Route(request(tc.method, tc.target))
		if err != nil {
			t.Fatal(err)
		}
		if want.Uncatalogued && !strings.Contains(tc.target, "media/get") {
			t.Fatalf("%s: uncatalogued", tc.target)
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
