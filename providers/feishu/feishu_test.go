package feishu

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/quotaware/throttle/apps"
	"github.com/quotaware/throttle/limiter/rule"
	"github.com/quotaware/throttle/providers"
	"github.com/quotaware/throttle/providers/feishu/feishutest"
	"github.com/quotaware/throttle/providers/internal/emulator"
	"github.com/quotaware/throttle/providers/internal/penaltytime"
	"github.com/quotaware/throttle/providers/internal/scopekind"
)

// 2025-03-10 12:34:56.250 Beijing.
var now = time.Date(2025, 3, 10, 4, 34, 56, 250e6, time.UTC)

const app = "cli_a1b2c3d4e5f6"

func testProfile(t testing.TB, cfg Config) providers.Profile {
	t.Helper()
	if len(cfg.Apps) == 0 {
		cfg.Apps = []App{{}}
	}
	if cfg.Apps[0].AppID == "" {
		cfg.Apps[0].AppID = app
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

func response(status int, header http.Header, body string) *http.Response {
	h := http.Header{"Content-Type": {"application/json; charset=utf-8"}}
	for k, v := range header {
		h[k] = v
	}
	return &http.Response{StatusCode: status, Header: h, ContentLength: -1,
		Body: io.NopCloser(iotest.HalfReader(strings.NewReader(body)))}
}

func TestClassify(t *testing.T) {
	p := testProfile(t, Config{Apps: []App{{}}})
	const send = "https://open.feishu.cn/open-apis/im/v1/messages?receive_id_type=chat_id"
	const sendToChat = send + "&receive_id=oc_abc"
	apiScope := "api:" + app + ":" + IMSend
	reset := http.Header{"X-Ogw-Ratelimit-Limit": {"50"}, "X-Ogw-Ratelimit-Reset": {"3"}}
	nextSec := time.Date(2025, 3, 10, 12, 34, 57, 0, penaltytime.Beijing())
	month := time.Date(2025, 4, 1, 0, 0, 5, 0, penaltytime.Beijing())
	body := func(code int, msg string) string { return fmt.Sprintf(`{"code":%d,"msg":%q}`, code, msg) }
	tests := []struct {
		name   string
		target string
		status int
		header http.Header
		body   string
		kind   providers.Kind
		code   string
		until  time.Time
		scope  string
		retry  time.Duration
	}{
		{"frequency 429", send, 429, reset, body(99991400, "request trigger frequency limit"), providers.Quota, "99991400", now.Add(3 * time.Second), apiScope, 0},
		{"frequency 400", send, 400, reset, body(99991400, "request trigger frequency limit"), providers.Quota, "99991400", now.Add(3 * time.Second), apiScope, 0},
		{"frequency without reset", send, 429, nil, body(99991400, "request trigger frequency limit"), providers.Quota, "99991400", nextSec, apiScope, 0},
		{"frequency with a garbled reset", send, 429, http.Header{"X-Ogw-Ratelimit-Reset": {"-5"}}, body(99991400, "x"), providers.Quota, "99991400", nextSec, apiScope, 0},
		{"monthly quota", send, 429, reset, body(99991403, "tenant monthly quota"), providers.Quota, "99991403", month, "app:" + app, 0},
		{"chat frequency with receive_id", sendToChat, 400, nil, body(230020, "This operation triggers the frequency limit."), providers.Quota, "230020", now.Add(time.Second),
			"entity:" + app + ":chat#" + hashID("chat_id", "oc_abc"), 0},
		{"chat frequency without receive_id", send, 400, nil, body(230020, "This operation triggers the frequency limit."), providers.Quota, "230020", now.Add(time.Second),
			"entity:" + app + ":chat#unknown", 0},
		{"uncatalogued API", "https://open.feishu.cn/open-apis/contact/v3/users/ou_7d8a6e6df7621556ce0d21922b676706ccs", 429, reset, body(99991400, "x"),
			providers.Quota, "99991400", now.Add(3 * time.Second), "api:" + app + ":POST uncatalogued", 0},
		{"plain 429", send, 429, http.Header{"Retry-After": {"2"}}, `<html>Too Many Requests</html>`, providers.Transient, "", time.Time{}, "", 2 * time.Second},
		{"429 with another code", send, 429, reset, body(99991401, "something else"), providers.Transient, "99991401", time.Time{}, "", 3 * time.Second},
		{"server error", send, 500, nil, body(-1, "system busy"), providers.Transient, "-1", time.Time{}, "", 0},
		{"bad gateway", send, 502, nil, ``, providers.Transient, "Bad Gateway", time.Time{}, "", 0},
		{"invalid token", send, 400, nil, body(99991663, "Invalid access token for authorization."), providers.Fatal, "99991663", time.Time{}, "", 0},
		{"no permission", send, 400, nil, body(99991672, "Access denied. One of the following scopes is required"), providers.Fatal, "99991672", time.Time{}, "", 0},
		{"bad request", send, 400, nil, body(230001, "invalid receive_id"), providers.OK, "230001", time.Time{}, "", 0},
		{"success", send, 200, nil, `{"code":0,"msg":"success","data":{"message_id":"om_99991400","code":99991403}}`, providers.OK, "", time.Time{}, "", 0},
		{"success with numbers", send, 200, nil, `{"data":{"total":99991400},"code":0}`, providers.OK, "", time.Time{}, "", 0},
		{"code as a string", send, 200, nil, `{"code":"99991400"}`, providers.OK, "", time.Time{}, "", 0},
		{"truncated code", send, 429, nil, `{"code":9999140`, providers.Transient, "", time.Time{}, "", 0},
	}
	for _, c := range []int{1000004, 1000005, 190004, 190005, 190010, 11232, 11233, 232019, 1254290, 1310217} {
		tests = append(tests, struct {
			name   string
			target string
			status int
			header http.Header
			body   string
			kind   providers.Kind
			code   string
			until  time.Time
			scope  string
			retry  time.Duration
		}{fmt.Sprint("rate code ", c), send, 400, nil, body(c, "frequency limit"), providers.Quota, fmt.Sprint(c), now.Add(time.Second), apiScope, 0})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp := response(tc.status, tc.header, tc.body)
			v := routedClassify(p, request("POST", tc.target), resp)
			if v.Kind != tc.kind || v.Code != tc.code || !v.Until.Equal(tc.until) || v.Scope != tc.scope || v.RetryAfter != tc.retry {
				t.Errorf("verdict %+v\nwant %v %q until %v scope %q retry %v", v, tc.kind, tc.code, tc.until, tc.scope, tc.retry)
			}
			if v.Kind == providers.Quota && !v.NotProcessed {
				t.Error("quota verdict not marked NotProcessed")
			}
			if got, err := io.ReadAll(resp.Body); err != nil || string(got) != tc.body {
				t.Errorf("body reads %q, %v", got, err)
			}
		})
	}
}

func TestRoute(t *testing.T) {
	rules := func(r providers.Route) string {
		var s []string
		for _, rl := range r.Rules {
			s = append(s, rl.String())
		}
		return strings.Join(s, " | ")
	}
	tests := []struct {
		name   string
		cfg    Config
		method string
		target string
		api    string
		rules  string
		scopes int
	}{
		{"IM send, no body", Config{Apps: []App{{}}}, "POST", "https://open.feishu.cn/open-apis/im/v1/messages?receive_id_type=chat_id", IMSend,
			"s:" + app + ":POST /open-apis/im/v1/messages: 50 per 1.05s | m:" + app + ":POST /open-apis/im/v1/messages: 1000 in any 1m0.05s | chat:" + app + ":unknown: 5 per 1.05s", 3},
		{"IM send, receive_id in the query", Config{Apps: []App{{}}}, "POST", "https://open.larksuite.com/open-apis/im/v1/messages?receive_id_type=email&receive_id=a%40b.com", IMSend,
			"s:" + app + ":POST /open-apis/im/v1/messages: 50 per 1.05s | m:" + app + ":POST /open-apis/im/v1/messages: 1000 in any 1m0.05s | chat:" + app + ":" + hashID("email", "a@b.com") + ": 5 per 1.05s", 3},
		// Feishu's front end merges repeated slashes: so does the preset,
		// which let such a path out unlimited.
		{"IM send, slashes repeated", Config{Apps: []App{{}}}, "POST", "https://open.feishu.cn//open-apis/im/v1/messages?receive_id_type=chat_id", IMSend,
			"s:" + app + ":POST /open-apis/im/v1/messages: 50 per 1.05s | m:" + app + ":POST /open-apis/im/v1/messages: 1000 in any 1m0.05s | chat:" + app + ":unknown: 5 per 1.05s", 3},
		{"reply, slashes repeated", Config{Apps: []App{{}}}, "POST", "https://open.feishu.cn//open-apis/im/v1/messages/om_dc13264520392913993dd051dba21dcf/reply",
			"POST /open-apis/im/v1/messages/:message_id/reply",
			"s:" + app + ":POST /open-apis/im/v1/messages/:message_id/reply: 50 per 1.05s | m:" + app + ":POST /open-apis/im/v1/messages/:message_id/reply: 1000 in any 1m0.05s | chat:" + app + ":" + hashID("message", "om_dc13264520392913993dd051dba21dcf") + ": 5 per 1.05s", 3},
		// Dot segments too: "/./open-apis/..." matched no profile and
		// went out unlimited.
		{"reply, a dot segment", Config{Apps: []App{{}}}, "POST", "https://open.feishu.cn/./open-apis/im/v1/messages/om_dc13264520392913993dd051dba21dcf/./reply",
			"POST /open-apis/im/v1/messages/:message_id/reply",
			"s:" + app + ":POST /open-apis/im/v1/messages/:message_id/reply: 50 per 1.05s | m:" + app + ":POST /open-apis/im/v1/messages/:message_id/reply: 1000 in any 1m0.05s | chat:" + app + ":" + hashID("message", "om_dc13264520392913993dd051dba21dcf") + ": 5 per 1.05s", 3},
		{"reply", Config{Apps: []App{{}}}, "POST", "https://open.feishu.cn/open-apis/im/v1/messages/om_dc13264520392913993dd051dba21dcf/reply",
			"POST /open-apis/im/v1/messages/:message_id/reply",
			"s:" + app + ":POST /open-apis/im/v1/messages/:message_id/reply: 50 per 1.05s | m:" + app + ":POST /open-apis/im/v1/messages/:message_id/reply: 1000 in any 1m0.05s | chat:" + app + ":" + hashID("message", "om_dc13264520392913993dd051dba21dcf") + ": 5 per 1.05s", 3},
		{"unlisted API at the default level", Config{Apps: []App{{DefaultLevel: 5}}}, "GET", "https://open.feishu.cn/open-apis/calendar/v4/calendars", "GET /open-apis/calendar/v4/calendars",
			"s:" + app + ":GET /open-apis/calendar/v4/calendars: 1 per 1.05s", 2},
		{"no per-chat rule", Config{Apps: []App{{NoPerChat: true}}}, "POST", "https://open.feishu.cn/open-apis/im/v1/messages?receive_id_type=chat_id", IMSend,
			"s:" + app + ":POST /open-apis/im/v1/messages: 50 per 1.05s | m:" + app + ":POST /open-apis/im/v1/messages: 1000 in any 1m0.05s", 2},
		{"per-chat rule given, then off", Config{Apps: []App{{PerChat: 3, NoPerChat: true}}}, "POST", "https://open.feishu.cn/open-apis/im/v1/messages?receive_id_type=chat_id", IMSend,
			"s:" + app + ":POST /open-apis/im/v1/messages: 50 per 1.05s | m:" + app + ":POST /open-apis/im/v1/messages: 1000 in any 1m0.05s", 2},
		{"default level given, then off", Config{Apps: []App{{DefaultLevel: 5, NoDefaultLevel: true}}}, "GET", "https://open.feishu.cn/open-apis/calendar/v4/calendars", "GET /open-apis/calendar/v4/calendars", "", 2},
		{"no default level", Config{Apps: []App{{NoDefaultLevel: true}}}, "GET", "https://open.feishu.cn/open-apis/calendar/v4/calendars", "GET /open-apis/calendar/v4/calendars", "", 2},
		{"free edition", Config{Apps: []App{{FreeEdition: true, MonthlyQuota: 500, APIs: map[string]int{"GET /open-apis/x/:id": 1}}}}, "GET", "https://open.feishu.cn/open-apis/x/7",
			"GET /open-apis/x/:id", "m:" + app + ":GET /open-apis/x/:id: 10 in any 1m0.05s | month:own: 500 per month (Asia/Shanghai)", 3},
		{"free edition in another tenant", Config{Apps: []App{{FreeEdition: true, MonthlyQuota: 500, Tenant: "t2", APIs: map[string]int{"GET /open-apis/x/:id": 1}}}}, "GET", "https://open.feishu.cn/open-apis/x/7",
			"GET /open-apis/x/:id", "m:" + app + ":GET /open-apis/x/:id: 10 in any 1m0.05s | month:t2: 500 per month (Asia/Shanghai)", 3},
		{"business edition", Config{Apps: []App{{Business: true, APIs: map[string]int{"GET /open-apis/y": 10}}}}, "GET", "https://open.feishu.cn/open-apis/y",
			"GET /open-apis/y", "s:" + app + ":GET /open-apis/y: 100 per 1.05s", 2},
		{"specific pattern first", Config{Apps: []App{{APIs: map[string]int{"GET /open-apis/z/:id": 1, "GET /open-apis/z/list": 5}}}}, "GET", "https://open.feishu.cn/open-apis/z/list",
			"GET /open-apis/z/list", "s:" + app + ":GET /open-apis/z/list: 1 per 1.05s", 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := testProfile(t, tc.cfg)
			req := request(tc.method, tc.target)
			if !p.Match(req) {
				t.Fatal("not matched")
			}
			r, err := p.Route(req)
			if err != nil {
				t.Fatal(err)
			}
			if r.API != tc.api || rules(r) != tc.rules || len(r.Scopes) != tc.scopes || r.Scopes[1] != "app:"+app {
				t.Errorf("route %q %q %q\nwant %q %q", r.API, rules(r), r.Scopes, tc.api, tc.rules)
			}
			for _, s := range r.Scopes {
				if len(s) > rule.MaxKeyLen || strings.Contains(s, "@") {
					t.Errorf("scope %q", s)
				}
			}
		})
	}
	p := testProfile(t, Config{Apps: []App{{}}})
	for _, target := range []string{"https://open.feishu.cn/other/api", "https://api.weixin.qq.com/open-apis/im/v1/messages", "https://open.feishu.cn.example/open-apis/x"} {
		if p.Match(request("GET", target)) {
			t.Errorf("%s matched", target)
		}
	}
}

func TestConfigValidation(t *testing.T) {
	tests := []struct {
		name  string
		cfg   Config
		field string
	}{
		{"defaults", Config{Apps: []App{{AppID: app}}}, ""},
		{"no AppID", Config{Apps: []App{{}}}, "App.AppID"},
		{"AppID with a colon", Config{Apps: []App{{AppID: "cli:1"}}}, "App.AppID"},
		{"empty host", Config{Hosts: []string{""}, Apps: []App{{AppID: app}}}, "Config.Hosts[0]"},
		{"unknown default level", Config{Apps: []App{{AppID: app, DefaultLevel: 12}}}, "App.DefaultLevel"},
		{"bad level", Config{Apps: []App{{AppID: app, Levels: map[int]Level{4: {PerSecond: -1}}}}}, "App.Levels[4]"},
		{"empty level", Config{Apps: []App{{AppID: app, Levels: map[int]Level{4: {}}}}}, "App.Levels[4]"},
		{"API of an unknown level", Config{Apps: []App{{AppID: app, APIs: map[string]int{"GET /open-apis/x": 99}}}}, "App.APIs"},
		{"API without a method", Config{Apps: []App{{AppID: app, APIs: map[string]int{"/open-apis/x": 4}}}}, "App.APIs"},
		{"API with a lower-case method", Config{Apps: []App{{AppID: app, APIs: map[string]int{"get /open-apis/x": 4}}}}, "App.APIs"},
		{"API outside /open-apis", Config{Apps: []App{{AppID: app, APIs: map[string]int{"GET /x": 4}}}}, "App.APIs"},
		{"per chat", Config{Apps: []App{{AppID: app, PerChat: -2}}}, "App.PerChat"},
		{"monthly quota", Config{Apps: []App{{AppID: app, FreeEdition: true, MonthlyQuota: -1}}}, "App.MonthlyQuota"},
		// Fields that contradict another, or that the app's edition ignores.
		{"both editions", Config{Apps: []App{{AppID: app, Business: true, FreeEdition: true}}}, "App.FreeEdition"},
		{"business with another level 10", Config{Apps: []App{{AppID: app, Business: true, Levels: map[int]Level{10: {PerSecond: 50}}}}}, "App.Levels[10]"},
		{"business with its own level 10", Config{Apps: []App{{AppID: app, Business: true, Levels: map[int]Level{10: {PerSecond: 100}}}}}, ""},
		{"business with a minute cap on level 10", Config{Apps: []App{{AppID: app, Business: true, Levels: map[int]Level{10: {PerSecond: 100, PerMinute: 3000}}}}}, ""},
		{"monthly quota off the free edition", Config{Apps: []App{{AppID: app, MonthlyQuota: 500}}}, "App.MonthlyQuota"},
		{"tenant off the free edition", Config{Apps: []App{{AppID: app, Tenant: "t2"}}}, "App.Tenant"},
		{"unknown apps' quota off the free edition", Config{Unknown: App{MonthlyQuota: 500}, Apps: []App{{AppID: app}}}, "App.MonthlyQuota"},
		{"month grace", Config{MonthGrace: time.Minute, Apps: []App{{AppID: app}}}, "Config.MonthGrace"},
		{"short penalty", Config{ShortPenalty: -1, Apps: []App{{AppID: app}}}, "Config.ShortPenalty"},
		{"jitter", Config{Jitter: -1, Apps: []App{{AppID: app}}}, "Config.Jitter"},
		{"penalty", Config{DefaultPenalty: -1, Apps: []App{{AppID: app}}}, "Config.DefaultPenalty"},
		{"custom table", Config{Apps: []App{{AppID: app, Levels: map[int]Level{1: {PerSecond: 2}}, NoDefaultAPIs: true, DefaultLevel: 1}}}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg)
			if tc.field == "" {
				if err != nil {
					t.Fatal(err)
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
	if LevelTable()[10] != (Level{PerSecond: 50}) {
		t.Error("LevelTable changed by the business edition")
	}
}

// TestClassifyEmulator classifies the emulator's own answers, on an emulator
// clock that stands still: a second or minute rolling over between two calls
// would reset the count the second call is meant to exceed.
func TestClassifyEmulator(t *testing.T) {
	s := feishutest.NewServer(feishutest.Options{
		Levels: map[int]feishutest.Level{4: {PerSecond: 100, PerMinute: 2}}, MonthlyQuota: 3, PerChat: 1,
		Clock: emulator.NewManualClock(time.Now()).Now})
	defer s.Close()
	u, _ := url.Parse(s.URL)
	p := testProfile(t, Config{Hosts: []string{u.Hostname()}, Apps: []App{{}}})
	tok := s.Token(app)
	call := func(query string) providers.Verdict {
		req := request("POST", s.URL+"/open-apis/im/v1/messages?receive_id_type=chat_id"+query)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := s.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return routedClassify(p, req, resp)
	}
	steps := []struct {
		query string
		kind  providers.Kind
		code  string
	}{
		{"&receive_id=oc_1", providers.OK, ""},
		{"&receive_id=oc_1", providers.Quota, "230020"},
		{"&receive_id=oc_2", providers.OK, ""},
		{"&receive_id=oc_3", providers.Quota, "99991400"},
	}
	for i, st := range steps {
		if v := call(st.query); v.Kind != st.kind || v.Code != st.code {
			t.Errorf("step %d: %+v", i, v)
		}
	}
	monthly := feishutest.NewServer(feishutest.Options{MonthlyQuota: 1})
	defer monthly.Close()
	tok = monthly.Token(app)
	for i, want := range []string{"", "99991403"} {
		req := request("GET", monthly.URL+"/open-apis/im/v1/chats")
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := monthly.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		v := routedClassify(p, req, resp)
		resp.Body.Close()
		if v.Code != want || (want != "" && (v.Scope != "app:"+app || resp.StatusCode != 429)) {
			t.Errorf("monthly call %d: %+v", i, v)
		}
	}
}

func FuzzClassify(f *testing.F) {
	f.Add(429, "application/json", "3", []byte(`{"code":99991400,"msg":"request trigger frequency limit"}`))
	f.Add(429, "", "", []byte(`{"code":99991403}`))
	p := testProfile(f, Config{Apps: []App{{FreeEdition: true}}})
	f.Fuzz(func(t *testing.T, status int, contentType, reset string, body []byte) {
		if status < 100 || status > 999 {
			status = 200
		}
		resp := &http.Response{
			StatusCode: status,
			Header:     http.Header{"Content-Type": {contentType}, "X-Ogw-Ratelimit-Reset": {reset}},
			Body:       io.NopCloser(iotest.OneByteReader(bytes.NewReader(body))),
		}
		req := request("POST", "https://open.feishu.cn/open-apis/im/v1/messages?receive_id=oc_1")
		v := routedClassify(p, req, resp)
		if v.Kind == providers.Quota && (v.Scope == "" || !v.Until.After(now) || v.Until.After(now.AddDate(0, 2, 0))) {
			t.Errorf("quota verdict out of bounds: %+v", v)
		}
		got, err := io.ReadAll(resp.Body)
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("body reads %q, %v; want %q", got, err, body)
		}
	})
}

// A frequency answer without its reset header on an API whose level caps
// the minute alone (levels 1-3) stops the API to the next minute: that
// minute is full, and the next second would only collect another 99991400.
func TestFrequencyWithoutResetOnAMinuteLevel(t *testing.T) {
	const api = "GET /open-apis/contact/v3/users/:user_id"
	p := testProfile(t, Config{Apps: []App{{APIs: map[string]int{api: 2}}}})
	req := request("GET", "https://open.feishu.cn/open-apis/contact/v3/users/u1")
	rt, err := p.Route(req)
	if err != nil {
		t.Fatal(err)
	}
	v := p.Classify(req, response(429, nil, `{"code":99991400,"msg":"request trigger frequency limit"}`), &rt)
	if next := time.Date(2025, 3, 10, 12, 35, 0, 0, penaltytime.Beijing()); v.Kind != providers.Quota || !v.Until.Equal(next) {
		t.Fatalf("99991400 without a reset on a level-2 API: %+v, want a penalty to %v", v, next)
	}
}

// 99991403 on the free edition stops the tenant's monthly scope, which
// every FreeEdition app of the tenant's routes names.
func TestMonthlyQuotaStopsTheTenant(t *testing.T) {
	p := MustNew(Config{Apps: []App{{AppID: "cli_a", FreeEdition: true}, {AppID: "cli_b", FreeEdition: true}}}).Profile()
	route := func(app string) (*http.Request, providers.Route) {
		req := request("GET", "https://open.feishu.cn/open-apis/im/v1/chats")
		req = req.WithContext(apps.NewContext(req.Context(), apps.App{ID: app}))
		r, err := p.Route(req)
		if err != nil {
			t.Fatal(err)
		}
		return req, r
	}
	reqA, a := route("cli_a")
	_, b := route("cli_b")
	v := p.Classify(reqA, response(429, nil, `{"code":99991403,"msg":"tenant monthly quota"}`), &a)
	if v.Kind != providers.Quota || v.Scope != "monthly:own" || !slices.Contains(b.Scopes, v.Scope) {
		t.Fatalf("99991403: %+v; want the tenant's monthly scope, in cli_b's routes too (%q)", v, b.Scopes)
	}
}

// An app nobody listed, and the shared scope of unknown tokens, count in a
// tenant of their own: they may be another company's, and a 99991403 of
// theirs must not stop the listed apps of the deployment's tenant.
func TestUnknownAppsAreNotInTheOwnTenant(t *testing.T) {
	// Two listed apps: a token nobody knows goes to the unknown scope (with
	// one, it would be charged to that app).
	p := MustNew(Config{Apps: []App{{AppID: "cli_a", FreeEdition: true}, {AppID: "cli_b", FreeEdition: true}}, Unknown: App{FreeEdition: true}}).Profile()
	route := func(id *apps.App) providers.Route {
		req := request("GET", "https://open.feishu.cn/open-apis/im/v1/chats")
		if id != nil {
			req = req.WithContext(apps.NewContext(req.Context(), *id))
		}
		r, err := p.Route(req)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	listed := route(&apps.App{ID: "cli_a"})
	own := listed.Scope(scopekind.Monthly)
	for _, r := range []providers.Route{route(&apps.App{ID: "cli_other", Learned: true}), route(nil)} {
		if m := r.Scope(scopekind.Monthly); m == "" || m == own {
			t.Fatalf("monthly scope %q beside the listed app's %q, want one of its own", m, own)
		}
	}
}

// App.APIs and App.Levels go over the defaults: one API or level given
// leaves the others as they were (an entry for one API used to drop
// IMSend's 1,000-a-minute cap), NoDefaultAPIs leaves the default APIs out,
// and the caller's maps are never changed.
func TestAPIsAndLevelsGoOverTheDefaults(t *testing.T) {
	perMinute := func(p providers.Profile, method, path string) int {
		t.Helper()
		route, err := p.Route(request(method, "https://open.feishu.cn"+path))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range route.Rules {
			if strings.HasPrefix(r.Key(), "m:") { // the minute's rule
				return r.Limit()
			}
		}
		return 0
	}
	const other = "GET /open-apis/contact/v3/users/:user_id"
	apis, levels := map[string]int{other: 5}, map[int]Level{5: {PerSecond: 2, PerMinute: 7}}
	over := testProfile(t, Config{Apps: []App{{APIs: apis, Levels: levels, DefaultLevel: 1}}})
	if got := perMinute(over, http.MethodPost, "/open-apis/im/v1/messages"); got != 1000 {
		t.Errorf("IMSend beside another API given: %d a minute, want the default level 4's 1000", got)
	}
	if got := perMinute(over, http.MethodGet, "/open-apis/contact/v3/users/u1"); got != 7 {
		t.Errorf("the API given: %d a minute, want its level's 7", got)
	}
	if len(apis) != 1 || len(levels) != 1 {
		t.Errorf("the caller's maps changed: %v, %v", apis, levels)
	}
	only := testProfile(t, Config{Apps: []App{{APIs: apis, NoDefaultAPIs: true, DefaultLevel: 1}}})
	if got, want := perMinute(only, http.MethodPost, "/open-apis/im/v1/messages"), LevelTable()[1].PerMinute; got != want {
		t.Errorf("IMSend with NoDefaultAPIs: %d a minute, want the default level 1's %d", got, want)
	}
}
