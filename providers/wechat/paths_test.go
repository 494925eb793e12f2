package wechat

import (
	"fmt"
	"strings"
	"testing"

	"github.com/quotaware/throttle/providers/internal/routetest"
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
		routetest.RoutesAsSent(t, p, "POST", target)
	}
}
