package wecom

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/quotaware/throttle/limiter/rule"
	"github.com/quotaware/throttle/providers"
	"github.com/quotaware/throttle/providers/internal/emulator"
	"github.com/quotaware/throttle/providers/internal/penaltytime"
	"github.com/quotaware/throttle/providers/wecom/wecomtest"
)

// 2025-03-10 12:34:56 Beijing.
var t0 = time.Date(2025, 3, 10, 4, 34, 56, 0, time.UTC)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

func testProfile(t testing.TB, cfg Config, clk *fakeClock) providers.Profile {
	t.Helper()
	if len(cfg.Apps) == 0 {
		cfg.Apps = []App{{}}
	}
	if cfg.Apps[0].CorpID == "" {
		cfg.Apps[0].CorpID = "ww0123456789abcdef"
	}
	cfg.Clock = clk.Now
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
		Header:        http.Header{"Content-Type": {"application/json; charset=UTF-8"}},
		Body:          io.NopCloser(iotest.HalfReader(strings.NewReader(body))),
		ContentLength: int64(len(body)),
	}
}

const target = "https://qyapi.weixin.qq.com/cgi-bin/message/send?access_token=TOKEN"

func TestClassify(t *testing.T) {
	const scope = "api:ww0123456789abcdef:/cgi-bin/message/send"
	hint := func(code int, msg string) string {
		return fmt.Sprintf(`{"errcode":%d,"errmsg":"%s, hint: [1741581296_12_a1b2c3], from ip: 203.0.113.7, more info at https://open.work.weixin.qq.com/devtool/query?e=%d"}`, code, msg, code)
	}
	tests := []struct {
		name   string
		status int
		body   string
		kind   providers.Kind
		code   string
		until  time.Time
		scope  string
		retry  time.Duration
	}{
		{"frequency", 200, hint(45009, "api freq out of limit"), providers.Quota, "45009", t0.Add(time.Minute), scope, 0},
		{"concurrency", 200, hint(45033, "api concurrent out of limit"), providers.Transient, "45033", time.Time{}, "", time.Second},
		{"update conflict", 200, hint(45035, "concurrent update conflict"), providers.Transient, "45035", time.Time{}, "", 0},
		{"abnormal traffic", 200, hint(45036, "abnormal traffic"), providers.Transient, "45036", time.Time{}, "", 0},
		{"version conflict", 200, `{"errcode":6000,"errmsg":"data version conflict"}`, providers.Transient, "6000", time.Time{}, "", 0},
		{"system busy", 200, `{"errcode":-1,"errmsg":"system busy"}`, providers.Transient, "-1", time.Time{}, "", 0},
		{"invalid token", 200, hint(40014, "invalid access_token"), providers.Fatal, "40014", time.Time{}, "", 0},
		{"expired token", 200, hint(42001, "access_token expired"), providers.Fatal, "42001", time.Time{}, "", 0},
		{"no privilege", 200, hint(60011, "no privilege to access/modify contact/party/agent"), providers.Fatal, "60011", time.Time{}, "", 0},
		{"other error", 200, hint(60111, "userid not found"), providers.OK, "60111", time.Time{}, "", 0},
		{"success", 200, `{"errcode":0,"errmsg":"ok","invaliduser":"45009","msgid":"45033"}`, providers.OK, "", time.Time{}, "", 0},
		{"success with numbers", 200, `{"errcode":0,"errmsg":"ok","department":[{"id":45009}],"count":45009}`, providers.OK, "", time.Time{}, "", 0},
		{"errcode as a string", 200, `{"errcode":"45009"}`, providers.OK, "", time.Time{}, "", 0},
		{"errcode in a nested object", 200, `{"data":{"errcode":45009},"errcode":0}`, providers.OK, "", time.Time{}, "", 0},
		{"truncated", 200, `{"errcode":450`, providers.OK, "", time.Time{}, "", 0},
		{"service unavailable", 503, `<html>busy</html>`, providers.Transient, "Service Unavailable", time.Time{}, "", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := testProfile(t, Config{Apps: []App{{}}}, &fakeClock{t: t0})
			resp := response(tc.status, tc.body)
			v := routedClassify(p, request("POST", target), resp)
			if v.Kind != tc.kind || v.Code != tc.code || !v.Until.Equal(tc.until) || v.Scope != tc.scope || v.RetryAfter != tc.retry {
				t.Errorf("verdict %+v, want %v %q until %v scope %q retry %v", v, tc.kind, tc.code, tc.until, tc.scope, tc.retry)
			}
			if tc.code == "45033" && !strings.Contains(v.Message, "in flight") {
				t.Errorf("45033 message %q lacks the hint", v.Message)
			}
			if got, err := io.ReadAll(resp.Body); err != nil || string(got) != tc.body {
				t.Errorf("body reads %q, %v", got, err)
			}
		})
	}
}

func TestEscalation(t *testing.T) {
	clk := &fakeClock{t: t0}
	p := testProfile(t, Config{Apps: []App{{}}}, clk)
	freq := `{"errcode":45009,"errmsg":"api freq out of limit"}`
	classify := func(path string) time.Time {
		v := routedClassify(p, request("POST", "https://qyapi.weixin.qq.com"+path), response(200, freq))
		if v.Kind != providers.Quota {
			t.Fatalf("%+v", v)
		}
		return v.Until
	}
	midnight := time.Date(2025, 3, 11, 0, 0, 5, 0, penaltytime.Beijing())
	steps := []struct {
		at   time.Duration // after t0
		path string
		want time.Time
	}{
		{0, "/cgi-bin/message/send", t0.Add(time.Minute)},
		{10 * time.Second, "/cgi-bin/message/send", t0.Add(time.Minute)}, // in flight: the same incident
		{0, "/cgi-bin/user/get", t0.Add(time.Minute)},                    // another API: its own memory
		{time.Minute, "/cgi-bin/message/send", t0.Add(2 * time.Minute).Add(time.Hour - time.Minute)},
		{time.Hour + time.Minute + 5*time.Minute, "/cgi-bin/message/send", midnight},
		{time.Hour + time.Minute + 5*time.Minute + time.Second, "/cgi-bin/message/send", midnight},
		// Long after the day's penalty: a fresh start.
		{48 * time.Hour, "/cgi-bin/message/send", t0.Add(48*time.Hour + time.Minute)},
		{48*time.Hour + time.Minute + 11*time.Minute, "/cgi-bin/message/send", t0.Add(48*time.Hour + 13*time.Minute)},
	}
	for i, s := range steps {
		clk.Set(t0.Add(s.at))
		if got := classify(s.path); !got.Equal(s.want) {
			t.Errorf("step %d: until %v, want %v", i, got, s.want)
		}
	}
}

// A 45009 another replica met, heard here (Profile.Heard), is a strike
// here too: this replica's next 45009 of the API after it climbs to the
// hour's block, as the replica that met it would, not back to a minute.
func TestEscalationHeardFromAnotherReplica(t *testing.T) {
	clk := &fakeClock{t: t0}
	cfg := Config{Apps: []App{{}}}
	a, b := testProfile(t, cfg, clk), testProfile(t, cfg, clk)
	freq := `{"errcode":45009,"errmsg":"api freq out of limit, hint: [x], from ip: 203.0.113.7"}`
	target := "https://qyapi.weixin.qq.com/cgi-bin/message/send"
	first := routedClassify(a, request("POST", target), response(200, freq))
	if !first.Until.Equal(t0.Add(time.Minute)) {
		t.Fatalf("the first 45009: %+v", first)
	}
	// Announced to b, whose clock is 200 ms behind a's: a minute and a
	// little left there is still the minute's step, not the hour's.
	clk.Set(t0.Add(-200 * time.Millisecond))
	b.Heard(first.Scope, first.Code, first.Until)
	clk.Set(t0.Add(61 * time.Second))
	if got := routedClassify(b, request("POST", target), response(200, freq)).Until; !got.Equal(clk.Now().Add(time.Hour)) {
		t.Errorf("the next 45009 on the replica that heard of the first: until %v, want the hour's %v", got, clk.Now().Add(time.Hour))
	}
}

func TestEscalationBounded(t *testing.T) {
	clk := &fakeClock{t: t0}
	p := testProfile(t, Config{MaxTracked: 8, Apps: []App{{}}}, clk)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				path := fmt.Sprintf("/cgi-bin/api%c/x%c", 'a'+g, 'a'+i%26)
				routedClassify(p, request("GET", "https://qyapi.weixin.qq.com"+path),
					response(200, `{"errcode":45009,"errmsg":"api freq out of limit"}`))
			}
		})
	}
	wg.Wait()
	// 400 scopes struck at once (with -race: no data race). The preset
	// remembers MaxTracked of them: with 2, an API struck again soon after
	// its penalty, once two others were struck meanwhile, is forgotten and
	// starts again at a minute instead of climbing to an hour.
	p = testProfile(t, Config{MaxTracked: 2, Apps: []App{{}}}, clk)
	strike := func(path string) time.Time {
		return routedClassify(p, request("GET", "https://qyapi.weixin.qq.com"+path),
			response(200, `{"errcode":45009,"errmsg":"api freq out of limit"}`)).Until
	}
	first := strike("/cgi-bin/user/get")
	clk.Set(first.Add(time.Second))
	strike("/cgi-bin/user/list")
	strike("/cgi-bin/department/list")
	if got := strike("/cgi-bin/user/get").Sub(clk.Now()); got != time.Minute {
		t.Fatalf("an API forgotten past MaxTracked struck again: %v, want a minute (the ladder's start)", got)
	}
}

func TestRoute(t *testing.T) {
	tests := []struct {
		name  string
		cfg   Config
		rules []string
	}{
		{"own app", Config{Apps: []App{{}}}, []string{
			"corp:m:ww0123456789abcdef:/cgi-bin/user/get: 10000 in any 1m0.05s",
			"corp:h:ww0123456789abcdef:/cgi-bin/user/get: 150000 in any 1h0m0.05s",
			"ip:m:default:/cgi-bin/user/get: 20000 in any 1m0.05s",
			"ip:h:default:/cgi-bin/user/get: 600000 in any 1h0m0.05s"}},
		{"third party", Config{ThirdParty: true, Egress: "nat-a", Jitter: 100 * time.Millisecond, Apps: []App{{}}}, []string{
			"corp:m:ww0123456789abcdef:/cgi-bin/user/get: 10000 in any 1m0.1s",
			"corp:h:ww0123456789abcdef:/cgi-bin/user/get: 150000 in any 1h0m0.1s",
			"ip:m:nat-a:/cgi-bin/user/get: 40000 in any 1m0.1s",
			"ip:h:nat-a:/cgi-bin/user/get: 1200000 in any 1h0m0.1s"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := testProfile(t, tc.cfg, &fakeClock{t: t0})
			req := request("GET", "https://QYAPI.weixin.qq.com/cgi-bin/user/get?access_token=SECRET&userid=zhangsan")
			if !p.Match(req) || p.Match(request("GET", "https://api.weixin.qq.com/cgi-bin/user/get")) {
				t.Fatal("Match")
			}
			r, err := p.Route(req)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, rule := range r.Rules {
				got = append(got, rule.String())
			}
			if strings.Join(got, "\n") != strings.Join(tc.rules, "\n") {
				t.Errorf("rules:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.rules, "\n"))
			}
			if r.API != "/cgi-bin/user/get" || len(r.Scopes) != 1 || r.Scopes[0] != "api:ww0123456789abcdef:/cgi-bin/user/get" {
				t.Errorf("route %+v", r)
			}
		})
	}
	p := testProfile(t, Config{Apps: []App{{}}}, &fakeClock{t: t0})
	r, err := p.Route(request("GET", "https://qyapi.weixin.qq.com/"+strings.Repeat("segment/", 40)))
	if err != nil {
		t.Fatal(err)
	}
	for _, rl := range r.Rules {
		if len(rl.Key()) > rule.MaxKeyLen {
			t.Errorf("key %q too long", rl.Key())
		}
	}
}

func TestConfigValidation(t *testing.T) {
	tests := []struct {
		name  string
		cfg   Config
		field string
	}{
		{"defaults", Config{Apps: []App{{CorpID: "ww1"}}}, ""},
		{"no CorpID", Config{Apps: []App{{}}}, "App.CorpID"},
		{"CorpID with spaces", Config{Apps: []App{{CorpID: "ww 1"}}}, "App.CorpID"},
		{"bad egress", Config{Egress: "a:b", Apps: []App{{CorpID: "ww1"}}}, "Config.Egress"},
		{"negative corp limit", Config{Apps: []App{{CorpID: "ww1", CorpPerMinute: -1}}}, "Config.Apps[0]: App.CorpPerMinute"},
		{"negative hour limit", Config{Apps: []App{{CorpID: "ww1", CorpPerHour: -5}}}, "Config.Apps[0]: App.CorpPerHour"},
		{"negative IP limit", Config{IPPerMinute: -1, Apps: []App{{CorpID: "ww1"}}}, "Config.IPPerMinute"},
		{"negative IP hour limit", Config{IPPerHour: -1, Apps: []App{{CorpID: "ww1"}}}, "Config.IPPerHour"},
		{"negative jitter", Config{Jitter: -time.Millisecond, Apps: []App{{CorpID: "ww1"}}}, "Config.Jitter"},
		{"empty escalation", Config{Escalation: []time.Duration{}, Apps: []App{{CorpID: "ww1"}}}, "Config.Escalation"},
		{"short escalation step", Config{Escalation: []time.Duration{time.Second}, Apps: []App{{CorpID: "ww1"}}}, "Config.Escalation[0]"},
		{"negative window", Config{EscalationWindow: -1, Apps: []App{{CorpID: "ww1"}}}, "Config.EscalationWindow"},
		{"day grace", Config{DayGrace: time.Hour, Apps: []App{{CorpID: "ww1"}}}, "Config.DayGrace"},
		{"max tracked", Config{MaxTracked: -1, Apps: []App{{CorpID: "ww1"}}}, "Config.MaxTracked"},
		{"concurrent retry", Config{ConcurrentRetry: -1, Apps: []App{{CorpID: "ww1"}}}, "Config.ConcurrentRetry"},
		{"failed token penalty", Config{FailedTokenPenalty: -1, Apps: []App{{CorpID: "ww1"}}}, "Config.FailedTokenPenalty"},
		{"penalty", Config{DefaultPenalty: -1, Apps: []App{{CorpID: "ww1"}}}, "Config.DefaultPenalty"},
		{"empty host", Config{Hosts: []string{""}, Apps: []App{{CorpID: "ww1"}}}, "Config.Hosts[0]"},
		{"hour under minute", Config{Apps: []App{{CorpID: "ww1", CorpPerMinute: 100, CorpPerHour: 50}}}, ""},
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
}

// TestClassifyEmulator classifies the emulator's own answers. The emulator's
// clock stands still, so its calendar minute cannot roll over between the
// calls and reset the count the last one is meant to exceed.
func TestClassifyEmulator(t *testing.T) {
	s := wecomtest.NewServer(wecomtest.Options{Limits: wecomtest.Limits{CorpPerMinute: 2, MaxConcurrent: 1},
		Hold: time.Second, Clock: emulator.NewManualClock(t0).Now})
	defer s.Close()
	u, _ := url.Parse(s.URL)
	clk := &fakeClock{t: t0}
	p := testProfile(t, Config{Hosts: []string{u.Hostname()}, Apps: []App{{}}}, clk)
	tok := s.Token("ww0123456789abcdef")
	call := func() providers.Verdict {
		req := request("GET", s.URL+"/cgi-bin/user/get?access_token="+tok)
		resp, err := s.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return routedClassify(p, req, resp)
	}
	var first providers.Verdict
	done := make(chan struct{})
	go func() { first = call(); close(done) }()
	for len(s.Requests()) == 0 {
		time.Sleep(time.Millisecond)
	}
	if v := call(); v.Kind != providers.Transient || v.Code != "45033" {
		t.Errorf("second in flight: %+v", v)
	}
	<-done
	if first.Kind != providers.OK {
		t.Errorf("first: %+v", first)
	}
	if v := call(); v.Kind != providers.OK {
		t.Errorf("second of the minute: %+v", v)
	}
	if v := call(); v.Kind != providers.Quota || v.Code != "45009" || !v.Until.Equal(t0.Add(time.Minute)) {
		t.Errorf("over the minute: %+v", v)
	}
	s.InjectBusy(1)
	if v := call(); v.Kind != providers.Transient || v.Code != "-1" {
		t.Errorf("busy: %+v", v)
	}
}

func FuzzClassify(f *testing.F) {
	f.Add(200, "application/json", []byte(`{"errcode":45009,"errmsg":"api freq out of limit"}`))
	f.Add(200, "", []byte(`{"errcode":45033}`))
	p := testProfile(f, Config{MaxTracked: 4, Apps: []App{{}}}, &fakeClock{t: t0})
	f.Fuzz(func(t *testing.T, status int, contentType string, body []byte) {
		if status < 100 || status > 999 {
			status = 200
		}
		resp := &http.Response{
			StatusCode: status,
			Header:     http.Header{"Content-Type": {contentType}},
			Body:       io.NopCloser(iotest.OneByteReader(bytes.NewReader(body))),
		}
		v := routedClassify(p, request("POST", target), resp)
		if v.Kind == providers.Quota && (v.Scope == "" || v.Until.IsZero()) {
			t.Errorf("quota verdict without scope or end: %+v", v)
		}
		got, err := io.ReadAll(resp.Body)
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("body reads %q, %v; want %q", got, err, body)
		}
	})
}

// A quota code in a 5xx answer's body is a quota answer (the status of
// WeCom's error answers is not documented, the code is); other 5xx stay
// transient.
func TestQuotaCodeInA5xx(t *testing.T) {
	clk := &fakeClock{t: t0}
	p := testProfile(t, Config{}, clk)
	req := request("GET", "https://qyapi.weixin.qq.com/cgi-bin/user/get?access_token=T&userid=u")
	rt, _ := p.Route(req)
	if v := p.Classify(req, response(503, `{"errcode":45009,"errmsg":"api freq out of limit"}`), &rt); v.Kind != providers.Quota {
		t.Fatalf("45009 in a 503: %+v, want a quota answer", v)
	}
	if v := p.Classify(req, response(502, `<html>bad gateway</html>`), &rt); v.Kind != providers.Transient {
		t.Fatalf("a gateway's 502: %+v, want transient", v)
	}
}
