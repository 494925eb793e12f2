package wechat

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/quotaware/throttle/limiter/rule"
	"github.com/quotaware/throttle/providers"
	"github.com/quotaware/throttle/providers/internal/emulator"
	"github.com/quotaware/throttle/providers/internal/penaltytime"
	"github.com/quotaware/throttle/providers/wechat/wechattest"
)

// 2025-03-10 12:34:56.789 Beijing.
var now = time.Date(2025, 3, 10, 4, 34, 56, 789e6, time.UTC)

func testProfile(t testing.TB, cfg Config) providers.Profile {
	t.Helper()
	if len(cfg.Apps) == 0 {
		cfg.Apps = []App{{}}
	}
	if cfg.Apps[0].AppID == "" {
		cfg.Apps[0].AppID = "wx1234567890abcdef"
	}
	cfg.Clock = func() time.Time { return now }
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p.Profile()
}

func request(method, target string) *http.Request {
	r, err := http.NewRequest(method, target, nil)
	if err != nil {
		panic(err)
	}
	return r
}

func response(status int, body string) *http.Response {
	return &http.Response{
		StatusCode:    status,
		Header:        http.Header{"Content-Type": {"application/json; encoding=utf-8"}},
		Body:          io.NopCloser(iotest.HalfReader(strings.NewReader(body))),
		ContentLength: -1,
	}
}

func TestClassify(t *testing.T) {
	p := testProfile(t, Config{Apps: []App{{}}})
	const target = "https://api.weixin.qq.com/cgi-bin/message/custom/send?access_token=TOKEN"
	scope := "api:wx1234567890abcdef:/cgi-bin/message/custom/send"
	midnight := time.Date(2025, 3, 11, 0, 0, 5, 0, penaltytime.Beijing()) // with DayGrace
	nextMinute := time.Date(2025, 3, 10, 12, 35, 0, 0, penaltytime.Beijing())
	tests := []struct {
		name   string
		status int
		body   string
		kind   providers.Kind
		code   string
		until  time.Time
		scope  string
	}{
		{"daily quota", 200, `{"errcode":45009,"errmsg":"reach max api daily quota limit rid: 64b7e8a3-1a2b3c4d-5e6f7a8b"}`,
			providers.Quota, "45009", midnight, scope},
		{"minute quota", 200, `{"errcode":45011,"errmsg":"api minute-quota reach limit, must slower, retry next minute rid: 1-2-3"}`,
			providers.Quota, "45011", nextMinute, scope},
		{"mini program frequency", 200, `{"errcode":44991,"errmsg":"api freq out of limit rid: 1-2-3"}`,
			providers.Quota, "44991", nextMinute, scope},
		{"spaces around", 200, " {\n \"errmsg\" : \"x\" , \"errcode\" : 45009 }", providers.Quota, "45009", midnight, scope},
		{"system busy", 200, `{"errcode":-1,"errmsg":"system error rid: 1-2-3"}`, providers.Transient, "-1", time.Time{}, ""},
		{"invalid credential", 200, `{"errcode":40001,"errmsg":"invalid credential, access_token is invalid or not latest rid: 1"}`,
			providers.Fatal, "40001", time.Time{}, ""},
		{"token expired", 200, `{"errcode":42001,"errmsg":"access_token expired rid: 1"}`, providers.Fatal, "42001", time.Time{}, ""},
		{"invalid token", 200, `{"errcode":40014,"errmsg":"invalid access_token rid: 1"}`, providers.Fatal, "40014", time.Time{}, ""},
		{"permission", 200, `{"errcode":48001,"errmsg":"api unauthorized rid: 1"}`, providers.Fatal, "48001", time.Time{}, ""},
		{"other error", 200, `{"errcode":40003,"errmsg":"invalid openid rid: 1"}`, providers.OK, "40003", time.Time{}, ""},
		{"success", 200, `{"errcode":0,"errmsg":"ok","msgid":45009}`, providers.OK, "", time.Time{}, ""},
		{"success without errcode", 200, `{"openid":"o45009","nickname":"45009","total":45011,"data":{"errcode":45009}}`,
			providers.OK, "", time.Time{}, ""},
		{"errcode as a string", 200, `{"errcode":"45009","errmsg":"x"}`, providers.OK, "", time.Time{}, ""},
		{"code, not errcode", 200, `{"code":45009,"msg":"x"}`, providers.OK, "", time.Time{}, ""},
		{"digits in errmsg only", 200, `{"errcode":0,"errmsg":"45009 45011 -1"}`, providers.OK, "", time.Time{}, ""},
		{"truncated errcode", 200, `{"errcode":4500`, providers.OK, "", time.Time{}, ""},
		{"not JSON", 200, `<html>45009</html>`, providers.OK, "", time.Time{}, ""},
		{"empty", 200, ``, providers.OK, "", time.Time{}, ""},
		{"gateway error", 502, `bad gateway`, providers.Transient, "Bad Gateway", time.Time{}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp := response(tc.status, tc.body)
			v := routedClassify(p, request("POST", target), resp)
			if v.Kind != tc.kind || v.Code != tc.code || !v.Until.Equal(tc.until) || v.Scope != tc.scope {
				t.Errorf("verdict %+v, want %v code %q until %v scope %q", v, tc.kind, tc.code, tc.until, tc.scope)
			}
			if (v.Kind == providers.Quota) != v.NotProcessed && v.Kind != providers.Transient {
				t.Errorf("NotProcessed %v for %v", v.NotProcessed, v.Kind)
			}
			got, err := io.ReadAll(resp.Body)
			if err != nil || string(got) != tc.body {
				t.Errorf("body reads %q, %v; want the original", got, err)
			}
		})
	}
}

// TestClassifyEmulator classifies the emulator's own answers end to end, on
// an emulator clock that stands still (a minute or day rolling over between
// two calls would reset the count the second is meant to exceed).
func TestClassifyEmulator(t *testing.T) {
	s := wechattest.NewServer(wechattest.Options{Limits: wechattest.Limits{
		Daily:         map[string]int{"/cgi-bin/user/info": 1},
		PerMinute:     map[string]int{"/cgi-bin/message/custom/send": 1},
		MiniPerMinute: map[string]int{"/wxa/msg_sec_check": 1},
	}, Clock: emulator.NewManualClock(time.Now()).Now})
	defer s.Close()
	u, _ := url.Parse(s.URL)
	p := testProfile(t, Config{Hosts: []string{u.Hostname()}, Apps: []App{{}}})
	tok := s.Token("wx1234567890abcdef")
	s.InjectBusy(1)
	tests := []struct {
		path string
		want []providers.Kind
	}{
		{"/cgi-bin/menu/get", []providers.Kind{providers.Transient, providers.OK}},
		{"/cgi-bin/user/info", []providers.Kind{providers.OK, providers.Quota}},
		{"/cgi-bin/message/custom/send", []providers.Kind{providers.OK, providers.Quota}},
		{"/wxa/msg_sec_check", []providers.Kind{providers.OK, providers.Quota}},
	}
	for _, tc := range tests {
		for i, want := range tc.want {
			req := request("POST", s.URL+tc.path+"?access_token="+tok)
			if !p.Match(req) {
				t.Fatalf("%s: not matched", tc.path)
			}
			resp, err := s.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			if v := routedClassify(p, req, resp); v.Kind != want {
				t.Errorf("%s call %d: %+v, want %v", tc.path, i, v, want)
			}
			resp.Body.Close()
		}
	}
	req := request("GET", s.URL+"/cgi-bin/user/info?access_token=forged")
	resp, err := s.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if v := routedClassify(p, req, resp); v.Kind != providers.Fatal || v.Code != "40001" {
		t.Errorf("forged token: %+v", v)
	}
}

func TestRouteAndMatch(t *testing.T) {
	p := testProfile(t, Config{Apps: []App{{PerMinute: map[string]int{"/cgi-bin/user/info": 100}}}})
	tests := []struct {
		target string
		match  bool
		api    string
		rules  []string
	}{
		{"https://api.weixin.qq.com/cgi-bin/user/info?access_token=T&openid=o1", true, "/cgi-bin/user/info",
			[]string{"day:wx1234567890abcdef:/cgi-bin/user/info: 5000000 per day (Asia/Shanghai)",
				"min:wx1234567890abcdef:/cgi-bin/user/info: 100 in any 1m0.05s"}},
		{"https://SH.API.WEIXIN.QQ.COM:443/cgi-bin/token?grant_type=client_credential", true, "/cgi-bin/token",
			[]string{"day:wx1234567890abcdef:/cgi-bin/token: 2000 per day (Asia/Shanghai)"}},
		{"https://api.weixin.qq.com/cgi-bin/media/get/123456789", true, "uncatalogued", nil},
		{"https://api.weixin.qq.com/cgi-bin/media/get/zhangsan", true, "uncatalogued", nil},
		{"https://qyapi.weixin.qq.com/cgi-bin/user/get", false, "", nil},
		{"https://api.weixin.qq.com.evil.example/cgi-bin/token", false, "", nil},
	}
	for _, tc := range tests {
		req := request("GET", tc.target)
		if got := p.Match(req); got != tc.match {
			t.Errorf("%s: Match %v", tc.target, got)
		}
		if !tc.match {
			continue
		}
		r, err := p.Route(req)
		if err != nil {
			t.Fatal(err)
		}
		var rules []string
		for _, rl := range r.Rules {
			rules = append(rules, rl.String())
		}
		if r.Uncatalogued != (tc.api == "uncatalogued") {
			t.Errorf("%s: Uncatalogued %v", tc.target, r.Uncatalogued)
		}
		if r.API != tc.api || strings.Join(rules, "|") != strings.Join(tc.rules, "|") ||
			len(r.Scopes) != 1 || r.Scopes[0] != "api:wx1234567890abcdef:"+tc.api {
			t.Errorf("%s: route %+v (%q)", tc.target, r, rules)
		}
		for _, s := range r.Scopes {
			if len(s) > rule.MaxKeyLen || strings.Contains(s, "access_token") {
				t.Errorf("scope %q", s)
			}
		}
	}
}

func TestConfigValidation(t *testing.T) {
	tests := []struct {
		name  string
		cfg   Config
		field string // empty: valid
	}{
		{"defaults", Config{Apps: []App{{AppID: "wxabc"}}}, ""},
		{"no AppID", Config{Apps: []App{{}}}, "App.AppID"},
		{"AppID with a colon", Config{Apps: []App{{AppID: "wx:1"}}}, "App.AppID"},
		{"AppID too long", Config{Apps: []App{{AppID: strings.Repeat("w", 65)}}}, "App.AppID"},
		{"empty host", Config{Hosts: []string{""}, Apps: []App{{AppID: "wxabc"}}}, "Config.Hosts[0]"},
		{"no hosts", Config{Hosts: []string{}, Apps: []App{{AppID: "wxabc"}}}, "Config.Hosts"},
		{"negative jitter", Config{Jitter: -1, Apps: []App{{AppID: "wxabc"}}}, "Config.Jitter"},
		{"day grace of a minute", Config{DayGrace: time.Minute, Apps: []App{{AppID: "wxabc"}}}, "Config.DayGrace"},
		{"negative penalty", Config{DefaultPenalty: -time.Second, Apps: []App{{AppID: "wxabc"}}}, "Config.DefaultPenalty"},
		{"zero daily quota", Config{Apps: []App{{AppID: "wxabc", Daily: map[string]int{"/cgi-bin/token": 0}}}}, "App.Daily"},
		{"relative path", Config{Apps: []App{{AppID: "wxabc", PerMinute: map[string]int{"cgi-bin/token": 5}}}}, "App.PerMinute"},
		{"path with a placeholder", Config{Apps: []App{{AppID: "wxabc", Daily: map[string]int{"/cgi-bin/media/{id}": 5}}}}, "App.Daily"},
		{"path with a query", Config{Apps: []App{{AppID: "wxabc", Daily: map[string]int{"/cgi-bin/media?x=1": 5}}}}, "App.Daily"},
		{"custom limits", Config{Apps: []App{{AppID: "wxabc", NoDefaultQuotas: true, PerMinute: map[string]int{"/wxa/x": 1}}}}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("error %v, want one naming %s", err, tc.field)
			}
			defer func() {
				if recover() == nil {
					t.Error("MustNew did not panic")
				}
			}()
			MustNew(tc.cfg).Profile()
		})
	}
	p := MustNew(Config{Apps: []App{{AppID: "wxabc"}}}).Profile()
	if err := p.Validate(); err != nil || p.Name != Name || p.DefaultPenalty != providers.DefaultPenalty {
		t.Errorf("profile %+v: %v", p, err)
	}
}

func FuzzClassify(f *testing.F) {
	f.Add(200, "application/json", []byte(`{"errcode":45009,"errmsg":"reach max api daily quota limit rid: 1"}`))
	f.Add(200, "", []byte(`{"errcode":-1}`))
	p := testProfile(f, Config{Apps: []App{{}}})
	f.Fuzz(func(t *testing.T, status int, contentType string, body []byte) {
		if status < 100 || status > 999 {
			status = 200
		}
		resp := &http.Response{
			StatusCode: status,
			Header:     http.Header{"Content-Type": {contentType}},
			Body:       io.NopCloser(iotest.OneByteReader(bytes.NewReader(body))),
		}
		v := routedClassify(p, request("POST", "https://api.weixin.qq.com/cgi-bin/user/info"), resp)
		if v.Kind == providers.Quota && (v.Scope == "" || v.Until.IsZero()) {
			t.Errorf("quota verdict without scope or end: %+v", v)
		}
		got, err := io.ReadAll(resp.Body)
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("body reads %q, %v; want %q", got, err, body)
		}
	})
}

// A quota code in a 5xx answer's body is a quota answer: the status of
// WeChat's error answers is not documented, the code is. Other 5xx stay
// transient.
func TestQuotaCodeInA5xx(t *testing.T) {
	p := testProfile(t, Config{Apps: []App{{}}})
	req := request("POST", "https://api.weixin.qq.com/cgi-bin/message/custom/send?access_token=T")
	v := routedClassify(p, req, response(503, `{"errcode":45009,"errmsg":"reach max api daily quota limit rid: 1-2-3"}`))
	midnight := time.Date(2025, 3, 11, 0, 0, 5, 0, penaltytime.Beijing())
	if v.Kind != providers.Quota || !v.Until.Equal(midnight) {
		t.Fatalf("45009 in a 503: %+v, want a quota answer until %v", v, midnight)
	}
	for _, body := range []string{`<html>bad gateway</html>`, `{"errcode":-1,"errmsg":"system busy"}`, `{"errcode":40001}`} {
		if v := routedClassify(p, req, response(502, body)); v.Kind != providers.Transient {
			t.Errorf("502 %s: %+v, want transient", body, v)
		}
	}
}

// Raising one API's quota keeps every other default: a Daily of one entry
// used to replace them all, the token exchange's 2,000 a day among them.
// NoDefaultQuotas leaves them out; the caller's map is never changed.
func TestQuotasGivenGoOverTheDefaults(t *testing.T) {
	limits := func(p providers.Profile, path string) map[string]int {
		t.Helper()
		req := httptest.NewRequest(http.MethodGet, "https://api.weixin.qq.com"+path+"?access_token=t", nil)
		route, err := p.Route(req)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int{}
		for _, r := range route.Rules {
			out[strings.SplitN(r.Key(), ":", 2)[0]] = r.Limit()
		}
		return out
	}
	daily := map[string]int{"/cgi-bin/message/custom/send": 5}
	over := testProfile(t, Config{Apps: []App{{Daily: daily}}})
	if got := limits(over, "/cgi-bin/message/custom/send"); got["day"] != 5 {
		t.Errorf("custom/send: %v, want the day's quota given, 5", got)
	}
	if got := limits(over, "/cgi-bin/token"); got["day"] != 2000 {
		t.Errorf("token: %v, want the default day's quota, 2000", got)
	}
	if got := limits(over, "/cgi-bin/stable_token"); got["min"] != 10000 {
		t.Errorf("stable_token: %v, want the default minute's limit, 10000", got)
	}
	if len(daily) != 1 {
		t.Errorf("the caller's Daily changed: %v", daily)
	}
	only := testProfile(t, Config{Apps: []App{{Daily: daily, NoDefaultQuotas: true}}})
	if got := limits(only, "/cgi-bin/token"); len(got) != 0 {
		t.Errorf("token with NoDefaultQuotas: %v, want no rule", got)
	}
	if got := limits(only, "/cgi-bin/message/custom/send"); got["day"] != 5 {
		t.Errorf("custom/send with NoDefaultQuotas: %v, want 5", got)
	}
}
