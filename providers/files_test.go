package providers_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/quotaware/throttle/providers"
	"github.com/quotaware/throttle/providers/dingtalk"
	"github.com/quotaware/throttle/providers/feishu"
	"github.com/quotaware/throttle/providers/wechat"
	"github.com/quotaware/throttle/providers/wecom"
)

// A file a user sent to a bot, downloaded through the provider, is the
// user's bytes: one that reads like the provider's error document (the IP
// ban's JSON, a daily or monthly quota code) used to stop every API of the
// egress IP for 5 minutes, an app for the month or an API for the day, on
// every replica, whenever anyone sent that file. An answer that says it is
// a file is never read as an error, and reaches the caller byte for byte.
func TestFileAnswersAreNeverErrors(t *testing.T) {
	type tc struct {
		profile providers.Profile
		url     string
		body    string
	}
	cases := map[string]tc{}
	dt := dingtalk.MustNew(dingtalk.Config{Apps: []dingtalk.App{{AppKey: "dingapp"}}}).Profile()
	for i, body := range []string{`{"punish":"deny"}`, `{"status":1111,"source":"me"}`, `<html>x5sec</html>`,
		`{"errcode":90001,"errmsg":"处罚将在 2099-01-01 00:00:00 结束."}`} {
		cases["dingtalk "+string(rune('a'+i))] = tc{dt, "https://oapi.dingtalk.com/media/downloadFile?access_token=tok&media_id=m1", body}
	}
	cases["wechat"] = tc{wechat.MustNew(wechat.Config{Apps: []wechat.App{{AppID: "wx1"}}}).Profile(),
		"https://api.weixin.qq.com/cgi-bin/media/get?access_token=tok&media_id=m1", `{"errcode":45009,"errmsg":"api freq out of limit"}`}
	cases["wecom"] = tc{wecom.MustNew(wecom.Config{Apps: []wecom.App{{CorpID: "ww1"}}}).Profile(),
		"https://qyapi.weixin.qq.com/cgi-bin/media/get?access_token=tok&media_id=m1", `{"errcode":45009,"errmsg":"api freq out of limit"}`}
	cases["feishu"] = tc{feishu.MustNew(feishu.Config{Apps: []feishu.App{{AppID: "cli_1"}}}).Profile(),
		"https://open.feishu.cn/open-apis/im/v1/messages/om_1/resources/file_1?type=file", `{"code":99991403,"msg":"quota"}`}
	for name, c := range cases {
		for _, cd := range []string{`attachment; filename="report.json"`, `inline; filename="a.txt"`, `attachment`} {
			for _, ct := range []string{"application/json", "text/plain", "text/html", ""} {
				req, _ := http.NewRequest(http.MethodGet, c.url, nil)
				route, err := c.profile.Route(req)
				if err != nil {
					t.Fatalf("%s: route: %v", name, err)
				}
				h := http.Header{"Content-Disposition": {cd}}
				if ct != "" {
					h.Set("Content-Type", ct)
				}
				resp := &http.Response{StatusCode: http.StatusOK, Header: h, Body: io.NopCloser(strings.NewReader(c.body)), ContentLength: -1}
				if v := c.profile.Classify(req, resp, &route); v.Kind != providers.OK {
					t.Errorf("%s, %q, %q: %v on %s until %v, want OK: the file is the user's", name, cd, ct, v.Kind, v.Scope, v.Until)
				}
				if got, _ := io.ReadAll(resp.Body); string(got) != c.body {
					t.Errorf("%s: the caller read %q, want the file as sent", name, got)
				}
			}
		}
	}
}

// Feishu's monthly tenant quota comes with a 429: a success that carries
// its code (a file without a Content-Disposition) is data, not the end of
// the app's month.
func TestFeishuMonthlyQuotaNeedsItsStatus(t *testing.T) {
	p := feishu.MustNew(feishu.Config{Apps: []feishu.App{{AppID: "cli_1"}}}).Profile()
	for status, want := range map[int]providers.Kind{http.StatusOK: providers.OK, http.StatusTooManyRequests: providers.Quota} {
		req, _ := http.NewRequest(http.MethodGet, "https://open.feishu.cn/open-apis/contact/v3/users/ou_1", nil)
		route, err := p.Route(req)
		if err != nil {
			t.Fatal(err)
		}
		resp := &http.Response{StatusCode: status, Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(strings.NewReader(`{"code":99991403,"msg":"quota"}`)), ContentLength: -1}
		if v := p.Classify(req, resp, &route); v.Kind != want {
			t.Errorf("99991403 with status %d: %v, want %v", status, v.Kind, want)
		}
	}
}
