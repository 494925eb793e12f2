package dingtalk_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/quotaware/throttle/providers/dingtalk"
)

// A robot is named in keys and scopes by a hash of its token keyed with
// EntityKey: another key gives another name, the token never appears, and
// every app of an Apps set names a robot alike (the Shared key).
func TestRobotNameIsKeyed(t *testing.T) {
	const token = "6a1b0c9d8e7f60514233241506f7e8d9c0b1a2f3e4d5c6b7a8f9e0d1c2b3a4f5"
	robotScope := func(cfg dingtalk.Config) string {
		p := dingtalk.MustNew(cfg).Profile()
		req, _ := http.NewRequest(http.MethodPost, "https://oapi.dingtalk.com/robot/send?access_token="+token, strings.NewReader(`{}`))
		r, err := p.Route(req)
		if err != nil {
			t.Fatal(err)
		}
		return r.Scopes[0]
	}
	k1 := robotScope(dingtalk.Config{EntityKey: "k1", Apps: []dingtalk.App{{AppKey: "a"}}})
	k2 := robotScope(dingtalk.Config{EntityKey: "k2", Apps: []dingtalk.App{{AppKey: "a"}}})
	other := robotScope(dingtalk.Config{EntityKey: "k1", Apps: []dingtalk.App{{AppKey: "b"}}})
	if !strings.HasPrefix(k1, "entity:robot#") || k1 == k2 || k1 != other || strings.Contains(k1, token[:16]) {
		t.Errorf("robot scopes: k1 %q, k2 %q, another app under k1 %q", k1, k2, other)
	}
}

// A deployment that only sends robot messages lists no app: its robots are
// limited as any app's are, and a call of an API (an app never learned)
// goes to the conservative unknown scope.
func TestRobotsNeedNoApp(t *testing.T) {
	p, err := dingtalk.New(dingtalk.Config{EntityKey: "k1"})
	if err != nil {
		t.Fatalf("a Config without Apps: %v", err)
	}
	route := func(target string) (string, int) {
		req, _ := http.NewRequest(http.MethodPost, target, strings.NewReader(`{}`))
		r, err := p.Profile().Route(req)
		if err != nil {
			t.Fatal(err)
		}
		return r.Scopes[0], len(r.Rules)
	}
	const token = "6a1b0c9d8e7f60514233241506f7e8d9c0b1a2f3e4d5c6b7a8f9e0d1c2b3a4f5"
	robot, rules := route("https://oapi.dingtalk.com/robot/send?access_token=" + token)
	withApp := dingtalk.MustNew(dingtalk.Config{EntityKey: "k1", Apps: []dingtalk.App{{AppKey: "a"}}})
	req, _ := http.NewRequest(http.MethodPost, "https://oapi.dingtalk.com/robot/send?access_token="+token, strings.NewReader(`{}`))
	want, err := withApp.Profile().Route(req)
	if err != nil {
		t.Fatal(err)
	}
	if robot != want.Scopes[0] || rules != len(want.Rules) {
		t.Errorf("robot without apps: scope %q, %d rules; with an app: %q, %d", robot, rules, want.Scopes[0], len(want.Rules))
	}
	if api, rules := route("https://api.dingtalk.com/v1.0/contact/users/me"); !strings.Contains(api, "unknown") || rules == 0 {
		t.Errorf("an API call without apps: scope %q, %d rules; want the unknown app's", api, rules)
	}
}
