package feishu

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/quotaware/throttle/providers"
)

// An App.APIs key is compared with a request's path as Feishu reads it
// ("." and ".." resolved, escapes decoded): a key written otherwise named
// no request, its level applying to nothing. New refuses it, naming the
// field and the key.
func TestAPIKeysWrittenAsNoRequestIsRead(t *testing.T) {
	for key, want := range map[string]string{
		"POST /open-apis/./im/v1/messages":       `"." or ".." segment: write "/open-apis/im/v1/messages"`,
		"GET /open-apis/x/../calendar/v4/x":      `"." or ".." segment: write "/open-apis/calendar/v4/x"`,
		"GET /open-apis/calendar/v4/calendars/.": `"." or ".." segment: write "/open-apis/calendar/v4/calendars"`,
		"GET /open-apis//calendar/v4/calendars":  `empty segment: write "/open-apis/calendar/v4/calendars"`,
		"GET /open-apis/calendar/v4/%63alendars": "'%'",
		"GET /open-apis/x/a%2Fb":                 "'%'",
	} {
		_, err := New(Config{Apps: []App{{AppID: app, APIs: map[string]int{key: 4}}}})
		field := fmt.Sprintf("App.APIs[%q]: the key must read", key)
		if err == nil || !strings.Contains(err.Error(), field) || !strings.Contains(err.Error(), want) {
			t.Errorf("APIs[%q]: %v, want an error saying %q and %s", key, err, field, want)
		}
	}
	// A trailing slash is how the catalog lists some APIs: it stays.
	if _, err := New(Config{Apps: []App{{AppID: app, APIs: map[string]int{"POST /open-apis/message/v4/batch_send/": 4, "GET /open-apis/a.b/..c": 4}}}}); err != nil {
		t.Errorf("plain keys: %v", err)
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

// A request is matched and routed by the path net/http sends: with the
// path in Opaque, URL.Path is empty and the request went out unmatched,
// with no limit at all; a stale RawPath routed a catalogued API as
// uncatalogued.
func TestMatchAndRouteReadThePathAsSent(t *testing.T) {
	p := testProfile(t, Config{Apps: []App{{DefaultLevel: 5, APIs: map[string]int{"GET /open-apis/x/:id": 1}}}})
	for _, tc := range []struct{ method, target string }{
		{"POST", "https://open.feishu.cn/open-apis/im/v1/messages?receive_id_type=chat_id"},
		{"POST", "https://open.feishu.cn/open-apis/im/v1/messages/om_aaa/reply"}, // its message's own rule
		{"GET", "https://open.feishu.cn/open-apis/calendar/v4/calendars"},
		{"GET", "https://open.larksuite.com/open-apis/x/7"},
		{"GET", "https://open.feishu.cn/open-apis/not/catalogued"},
	} {
		plain := request(tc.method, tc.target)
		if !p.Match(plain) {
			t.Fatalf("%s not matched", tc.target)
		}
		want, err := p.Route(plain)
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
	// Opaque outside /open-apis/ is no API of the open platform.
	other := request("GET", "https://open.feishu.cn/")
	other.URL.Opaque = "//open.feishu.cn/other/api"
	if p.Match(other) {
		t.Error("Opaque //open.feishu.cn/other/api matched")
	}
}
