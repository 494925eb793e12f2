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
