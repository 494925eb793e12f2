package wechat

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/quotaware/throttle/providers"
)

// A Daily or PerMinute key is compared with a request's path as WeChat
// reads it ("." and ".." resolved, escapes decoded): a key written
// otherwise limited nothing, its quota silently not applied. New refuses
// it, naming the field and the key.
func TestAPIKeysWrittenAsNoRequestIsRead(t *testing.T) {
	for _, tc := range []struct{ field, key, want string }{
		{"Daily", "/cgi-bin/./message/mass/sendall", `"." or ".." segment: write "/cgi-bin/message/mass/sendall"`},
		{"Daily", "/wxa/./msg_sec_check", `"." or ".." segment: write "/wxa/msg_sec_check"`},
		{"PerMinute", "/wxa/x/../msg_sec_check", `"." or ".." segment: write "/wxa/msg_sec_check"`},
		{"PerMinute", "/cgi-bin/user/info/.", `"." or ".." segment: write "/cgi-bin/user/info"`},
		{"Daily", "/cgi-bin//user/info", `empty segment: write "/cgi-bin/user/info"`},
		{"Daily", "/cgi-bin/user/%69nfo", "'%'"},
		{"PerMinute", "/wxa/msg%2Fsec_check", "'%'"},
	} {
		app := App{AppID: "wx1"}
		if tc.field == "Daily" {
			app.Daily = map[string]int{tc.key: 3}
		} else {
			app.PerMinute = map[string]int{tc.key: 3}
		}
		_, err := New(Config{Apps: []App{app}})
		field := fmt.Sprintf("App.%s[%q]: the key must be an API path", tc.field, tc.key)
		if err == nil || !strings.Contains(err.Error(), field) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s[%q]: %v, want an error saying %q and %s", tc.field, tc.key, err, field, tc.want)
		}
	}
	if _, err := New(Config{Apps: []App{{AppID: "wx1", Daily: map[string]int{"/wxa/msg_sec_check": 3, "/v1.0/a.b/..c": 1}}}}); err != nil {
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
	for name, r := range map[string]*http.Request{"stale RawPath": stale, "Opaque": opaque, "Opaque without the host": hostless} {
		if got := r.URL.RequestURI(); got != plain.URL.RequestURI() && got != "https://"+host+plain.URL.RequestURI() {
			t.Fatalf("%s: net/http sends %q, not %q", name, got, plain.URL.RequestURI())
		}
	}
	return map[string]*http.Request{"stale RawPath": stale, "Opaque": opaque, "Opaque without the host": hostless}
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
// path in Opaque routed a catalogued API as uncatalogued, with no rules at
// all (the 100 a day of mass sends not kept).
func TestRouteReadsThePathAsSent(t *testing.T) {
	p := testProfile(t, Config{Apps: []App{{
		Daily:     map[string]int{"/wxa/msg_sec_check": 3},
		PerMinute: map[string]int{"/cgi-bin/user/info": 100},
	}}})
	for _, target := range []string{
		"https://api.weixin.qq.com/cgi-bin/message/mass/sendall?access_token=T",
		"https://api.weixin.qq.com/cgi-bin/user/info?access_token=T&openid=o1",
		"https://api.weixin.qq.com/wxa/msg_sec_check?access_token=T",
		"https://api.weixin.qq.com/cgi-bin/media/get/zhangsan?access_token=T",
	} {
		want, err := p.Route(request("POST", target))
		if err != nil {
			t.Fatal(err)
		}
		for name, req := range sentAlike(t, "POST", target) {
			if !p.Match(req) {
				t.Errorf("%s, %s: not matched", target, name)
				continue
			}
			got, err := p.Route(req)
			if err != nil || routeString(got) != routeString(want) {
				t.Errorf("%s, %s: routed %s, %v\nwant %s", target, name, routeString(got), err, routeString(want))
			}
		}
	}
}
