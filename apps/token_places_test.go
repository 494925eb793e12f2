package apps_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/quotaware/throttle/apps"
	"github.com/quotaware/throttle/internal/tokenform"
)

// Issue 21.2: tokens are read wherever SDKs put them. DingTalk's official
// SDK (darabonba/tea) sets its header through the map, in lower case,
// which Header.Get and the canonical key miss.
func TestTokenWhereSDKsPutIt(t *testing.T) {
	const tok = "tok-0123456789abcdef"
	cases := []struct {
		name, url string
		header    http.Header // set through the map, as given
		want      string
	}{
		{"darabonba/tea lower-case header", "https://api.dingtalk.com/v1.0/contact/users/u1",
			http.Header{"x-acs-dingtalk-access-token": {tok}}, tok},
		{"canonical header (Header.Set)", "https://api.dingtalk.com/v1.0/contact/users/u1",
			http.Header{"X-Acs-Dingtalk-Access-Token": {tok}}, tok},
		{"mixed-case header", "https://api.dingtalk.com/v1.0/contact/users/u1",
			http.Header{"X-ACS-DINGTALK-ACCESS-TOKEN": {tok}}, tok},
		{"lark Authorization: Bearer", "https://open.feishu.cn/open-apis/im/v1/messages",
			http.Header{"Authorization": {"Bearer " + tok}}, tok},
		{"lower-case authorization", "https://open.feishu.cn/open-apis/im/v1/messages",
			http.Header{"authorization": {"Bearer " + tok}}, tok},
		{"upper-case BEARER", "https://open.feishu.cn/open-apis/im/v1/messages",
			http.Header{"Authorization": {"BEARER " + tok}}, tok},
		{"silenceper/wechat query", "https://api.weixin.qq.com/cgi-bin/user/info?access_token=" + tok + "&openid=o1", nil, tok},
		{"go-workwx query", "https://qyapi.weixin.qq.com/cgi-bin/user/get?access_token=" + tok + "&userid=u", nil, tok},
		{"godingtalk query", "https://oapi.dingtalk.com/user/get?access_token=" + tok + "&userid=u", nil, tok},
		{"escaped query", "https://oapi.dingtalk.com/user/get?access_token=" + url.QueryEscape("a+b/c="), nil, "a+b/c="},
		{"Basic is no token", "https://open.feishu.cn/open-apis/x", http.Header{"authorization": {"Basic abc"}}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", tc.url, nil)
			for k, v := range tc.header {
				req.Header[k] = v
			}
			if got := tokenform.FromRequest(req); got != tc.want {
				t.Fatalf("Token = %q, want %q", got, tc.want)
			}
		})
	}
}

// Issue 21.2: the documented body field (DingTalk's old API takes
// access_token as a form field) is read by Resolve, and the body is left
// for the request to send.
func TestResolveReadsTheFormField(t *testing.T) {
	book := apps.MustNew(apps.Config{})
	ctx := context.Background()
	_ = book.Learn(ctx, "form-token-0001", apps.App{Provider: "dingtalk", ID: "dingA"}, time.Hour)
	body := "access_token=form-token-0001&userid=u1"
	// The content type set canonically, and in lower case through the
	// header map, as darabonba/tea clients write headers (Header.Get
	// misses it).
	for _, set := range []func(http.Header){
		func(h http.Header) { h.Set("Content-Type", "application/x-www-form-urlencoded") },
		func(h http.Header) { h["content-type"] = []string{"application/x-www-form-urlencoded"} },
	} {
		req, _ := http.NewRequest("POST", "https://oapi.dingtalk.com/user/get", strings.NewReader(body))
		set(req.Header)
		got := book.Resolve(req, "dingtalk")
		if app, ok := apps.FromContext(got.Context()); !ok || app.ID != "dingA" {
			t.Fatalf("form field, headers %v: %+v, %v; want dingA", req.Header, app, ok)
		}
		sent, err := io.ReadAll(got.Body)
		if err != nil || string(sent) != body {
			t.Fatalf("body after Resolve: %q, %v; want it unchanged", sent, err)
		}
	}
}

// Issue 21.2: a request of a provider that needs a token but carries none
// the Book can read is counted as unknown (Stats.Unknown, NoToken), never
// silent; webhooks, exchanges and suite-token calls need none.
func TestUnreadableTokenIsCounted(t *testing.T) {
	book := apps.MustNew(apps.Config{})
	cases := []struct {
		provider, method, url string
		counted               bool
	}{
		{"dingtalk", "GET", "https://api.dingtalk.com/v1.0/contact/users/u1", true}, // a header the Book cannot read
		{"dingtalk", "GET", "https://oapi.dingtalk.com/user/get?userid=u1", true},
		{"wechat", "POST", "https://api.weixin.qq.com/cgi-bin/message/custom/send", true},
		{"feishu", "GET", "https://open.feishu.cn/open-apis/contact/v3/users/u1", true},
		{"dingtalk", "POST", "https://oapi.dingtalk.com/robot/send?access_token=hook", false},
		{"dingtalk", "GET", "https://oapi.dingtalk.com/gettoken?appkey=k&appsecret=s", false},
		{"wecom", "POST", "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=k", false},
		{"wecom", "POST", "https://qyapi.weixin.qq.com/cgi-bin/service/get_permanent_code?suite_access_token=s", false},
		{"feishu", "POST", "https://open.feishu.cn/open-apis/bot/v2/hook/abc", false},
		// Spelt as the front ends still read them.
		{"dingtalk", "POST", "https://oapi.dingtalk.com//robot/send/?access_token=hook", false},
		{"feishu", "POST", "https://open.feishu.cn/open-apis//bot/v2/hook/abc", false},
	}
	var want int64
	for _, tc := range cases {
		req, _ := http.NewRequest(tc.method, tc.url, nil)
		book.Resolve(req, tc.provider)
		if tc.counted {
			want++
		}
		if s := book.Stats(); s.Unknown != want || s.NoToken != want {
			t.Fatalf("%s %s: Unknown %d, NoToken %d; want %d", tc.method, tc.url, s.Unknown, s.NoToken, want)
		}
	}
}
