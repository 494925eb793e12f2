package feishutest

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quotaware/throttle/providers/internal/emulator"
)

type answer struct {
	status int
	header http.Header
	Code   int    `json:"code"`
	Msg    string `json:"msg"`
	Token  string `json:"tenant_access_token"`
}

func do(t *testing.T, s *Server, method, target, tok, body string) answer {
	t.Helper()
	req, _ := http.NewRequest(method, s.URL+target, strings.NewReader(body))
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := s.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, header: resp.Header}
	if err := json.Unmarshal(raw, &a); err != nil {
		t.Fatalf("body %q: %v", raw, err)
	}
	return a
}

// 12:00:00.5 Beijing: half a second into a second, a minute, a month.
var t0 = time.Date(2025, 2, 28, 4, 0, 0, 500e6, time.UTC)

func TestLevels(t *testing.T) {
	tests := []struct {
		name        string
		api, target string
		levels      map[int]Level
		limit       int
		wantLimit   string
		wantReset   string
		reset       time.Duration // after t0, when the window reopens
	}{
		{"level 5: 1/s", "GET /open-apis/calendar/v4/calendars/:calendar_id", "/open-apis/calendar/v4/calendars/feishu.cn_abc",
			nil, 1, "1", "1", 500 * time.Millisecond},
		{"level 1: 10/min", "GET /open-apis/approval/v4/instances", "/open-apis/approval/v4/instances",
			nil, 10, "10", "60", 59*time.Second + 500*time.Millisecond},
		{"level 4 per second", IMSend, "/open-apis/im/v1/messages?receive_id_type=chat_id",
			map[int]Level{4: {PerSecond: 3, PerMinute: 100}}, 3, "3", "1", 500 * time.Millisecond},
		{"level 4 per minute", IMSend, "/open-apis/im/v1/messages?receive_id_type=chat_id",
			map[int]Level{4: {PerSecond: 50, PerMinute: 4}}, 4, "4", "60", 59*time.Second + 500*time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := emulator.NewManualClock(t0)
			apis := defaultAPIs()
			apis["GET /open-apis/calendar/v4/calendars/:calendar_id"] = 5
			apis["GET /open-apis/approval/v4/instances"] = 1
			s := NewServer(Options{Levels: tc.levels, APIs: apis, Clock: clk.Now, PerChat: -1})
			defer s.Close()
			tok := s.Token("cli_a")
			method, _, _ := strings.Cut(tc.api, " ")
			for i := 0; i < tc.limit; i++ {
				if a := do(t, s, method, tc.target, tok, `{"receive_id":"oc_1"}`); a.status != 200 || a.Code != 0 {
					t.Fatalf("call %d: %+v", i+1, a)
				}
			}
			a := do(t, s, method, tc.target, tok, `{"receive_id":"oc_1"}`)
			if a.status != http.StatusTooManyRequests || a.Code != CodeFrequency || a.Msg != MsgFrequency ||
				a.header.Get("X-Ogw-Ratelimit-Limit") != tc.wantLimit || a.header.Get("X-Ogw-Ratelimit-Reset") != tc.wantReset {
				t.Fatalf("over the limit: %+v", a)
			}
			if a := do(t, s, method, tc.target, s.Token("cli_b"), `{}`); a.Code != 0 {
				t.Fatalf("another app: %+v", a)
			}
			if got := s.Requests()[tc.limit].Path; got != tc.api {
				t.Errorf("recorded API %q, want %q", got, tc.api)
			}
			clk.Set(t0.Add(tc.reset - time.Millisecond))
			if a := do(t, s, method, tc.target, tok, `{}`); a.Code != CodeFrequency {
				t.Fatalf("before the reset: %+v", a)
			}
			clk.Set(t0.Add(tc.reset))
			if a := do(t, s, method, tc.target, tok, `{}`); a.Code != 0 {
				t.Fatalf("after the reset: %+v", a)
			}
		})
	}
}

func TestMonthlyQuota(t *testing.T) {
	clk := emulator.NewManualClock(t0)
	s := NewServer(Options{MonthlyQuota: 3, Clock: clk.Now})
	defer s.Close()
	tok := s.Token("cli_a")
	for i, target := range []string{"/open-apis/contact/v3/users/ou_1", "/open-apis/contact/v3/users/ou_2", "/open-apis/im/v1/chats"} {
		if a := do(t, s, "GET", target, tok, ""); a.Code != 0 {
			t.Fatalf("call %d: %+v", i, a)
		}
	}
	a := do(t, s, "GET", "/open-apis/im/v1/chats", tok, "")
	if a.status != http.StatusTooManyRequests || a.Code != CodeMonthlyQuota || a.header.Get("X-Ogw-Ratelimit-Reset") != "" {
		t.Fatalf("over the monthly quota: %+v", a)
	}
	clk.Set(time.Date(2025, 3, 1, 0, 0, 0, 0, Beijing).Add(-time.Millisecond))
	tok = s.Token("cli_a") // the first one expired meanwhile
	if a := do(t, s, "GET", "/open-apis/im/v1/chats", tok, ""); a.Code != CodeMonthlyQuota {
		t.Fatalf("just before the 1st: %+v", a)
	}
	clk.Add(time.Millisecond)
	if a := do(t, s, "GET", "/open-apis/im/v1/chats", tok, ""); a.Code != 0 {
		t.Fatalf("on the 1st: %+v", a)
	}
}

// The monthly quota is the tenant's: two internal apps of one tenant share
// it, an app of another tenant has its own.
func TestMonthlyQuotaPerTenant(t *testing.T) {
	clk := emulator.NewManualClock(t0)
	s := NewServer(Options{MonthlyQuota: 2, Clock: clk.Now, Tenants: map[string]string{"cli_a": "corp", "cli_b": "corp"}})
	defer s.Close()
	for i, app := range []string{"cli_a", "cli_b"} {
		if a := do(t, s, "GET", "/open-apis/im/v1/chats", s.Token(app), ""); a.Code != 0 {
			t.Fatalf("call %d by %s: %+v", i, app, a)
		}
	}
	if a := do(t, s, "GET", "/open-apis/im/v1/chats", s.Token("cli_a"), ""); a.Code != CodeMonthlyQuota {
		t.Fatalf("the tenant's third call: %+v, want 99991403", a)
	}
	if a := do(t, s, "GET", "/open-apis/im/v1/chats", s.Token("cli_c"), ""); a.Code != 0 {
		t.Fatalf("another tenant's app: %+v", a)
	}
}

func TestPerChat(t *testing.T) {
	clk := emulator.NewManualClock(t0)
	s := NewServer(Options{PerChat: 2, Clock: clk.Now})
	defer s.Close()
	tok := s.Token("cli_a")
	send := func(query, body string) answer {
		return do(t, s, "POST", "/open-apis/im/v1/messages?receive_id_type=chat_id"+query, tok, body)
	}
	for i := range 2 {
		if a := send("", `{"receive_id":"oc_1","msg_type":"text"}`); a.Code != 0 {
			t.Fatalf("call %d: %+v", i, a)
		}
	}
	if a := send("", `{"receive_id":"oc_1"}`); a.status != http.StatusBadRequest || a.Code != CodeChatFrequency {
		t.Fatalf("third to one chat in a second: %+v", a)
	}
	if a := send("&receive_id=oc_1", `{}`); a.Code != CodeChatFrequency {
		t.Fatalf("receive_id in the query: %+v", a)
	}
	if a := send("&receive_id=oc_2", `{}`); a.Code != 0 {
		t.Fatalf("another chat: %+v", a)
	}
	clk.Add(500 * time.Millisecond)
	if a := send("", `{"receive_id":"oc_1"}`); a.Code != 0 {
		t.Fatalf("next second: %+v", a)
	}
}

func TestTokenAndAuth(t *testing.T) {
	clk := emulator.NewManualClock(t0)
	s := NewServer(Options{Apps: map[string]string{"cli_a": "sec"}, Clock: clk.Now})
	defer s.Close()
	const tokenPath = "/open-apis/auth/v3/tenant_access_token/internal"
	tests := []struct {
		body string
		code int
	}{
		{`{"app_id":"cli_a","app_secret":"sec"}`, 0},
		{`{"app_id":"cli_a","app_secret":"bad"}`, CodeInvalidSecret},
		{`{"app_id":"cli_x","app_secret":"sec"}`, CodeInvalidApp},
		{`not json`, CodeInvalidApp},
	}
	var tok string
	for _, tc := range tests {
		a := do(t, s, "POST", tokenPath, "", tc.body)
		if a.Code != tc.code || (tc.code == 0) != strings.HasPrefix(a.Token, "t-") {
			t.Errorf("%s: %+v", tc.body, a)
		}
		if a.Token != "" {
			tok = a.Token
		}
	}
	for tk, code := range map[string]int{tok: 0, "": CodeTokenMissing, "t-forged": CodeTokenInvalid} {
		if a := do(t, s, "GET", "/open-apis/im/v1/chats", tk, ""); a.Code != code {
			t.Errorf("token %q: %+v", tk, a)
		}
	}
	clk.Add(7200 * time.Second)
	if a := do(t, s, "GET", "/open-apis/im/v1/chats", tok, ""); a.Code != CodeTokenExpired {
		t.Errorf("expired: %+v", a)
	}
}

// A self-built app's app_access_token/internal is an exchange too, its
// token usable on the app's calls (it answered 400, "missing access
// token", as an ordinary call).
func TestAppAccessTokenInternal(t *testing.T) {
	s := NewServer(Options{Apps: map[string]string{"cli_a": "sec"}})
	defer s.Close()
	resp, err := http.Post(s.URL+"/open-apis/auth/v3/app_access_token/internal", "application/json",
		strings.NewReader(`{"app_id":"cli_a","app_secret":"sec"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a struct {
		Code   int    `json:"code"`
		Token  string `json:"app_access_token"`
		Expire int    `json:"expire"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil || a.Code != 0 || !strings.HasPrefix(a.Token, "t-") || a.Expire <= 0 {
		t.Fatalf("app_access_token/internal: %+v, %v", a, err)
	}
	if got := do(t, s, "GET", "/open-apis/im/v1/chats", a.Token, ""); got.Code != 0 {
		t.Fatalf("a call with the app token: %+v", got)
	}
}

func TestInjectAndTimeScale(t *testing.T) {
	clk := emulator.NewManualClock(t0)
	s := NewServer(Options{Clock: clk.Now, TimeScale: 1000, APIs: map[string]int{"GET /open-apis/x": 1}})
	defer s.Close()
	tok := s.Token("cli_a")
	s.InjectBusy(1)
	s.Inject(1, 429, http.Header{"X-Ogw-Ratelimit-Reset": {"7"}}, `{"code":99991400,"msg":"request trigger frequency limit"}`)
	if a := do(t, s, "GET", "/open-apis/x", tok, ""); a.status != 500 || a.Code != CodeBusy {
		t.Errorf("busy: %+v", a)
	}
	if a := do(t, s, "GET", "/open-apis/x", tok, ""); a.Code != CodeFrequency || a.header.Get("X-Ogw-Ratelimit-Reset") != "7" {
		t.Errorf("injected: %+v", a)
	}
	for range 10 {
		do(t, s, "GET", "/open-apis/x", tok, "")
	}
	if a := do(t, s, "GET", "/open-apis/x", tok, ""); a.Code != CodeFrequency {
		t.Fatalf("eleventh of a level-1 minute: %+v", a)
	}
	clk.Add(60 * time.Millisecond) // one emulated minute
	if a := do(t, s, "GET", "/open-apis/x", tok, ""); a.Code != 0 {
		t.Errorf("after a scaled minute: %+v", a)
	}
	c := s.Counters()
	if c.Total != 14 || c.OK != 11 || c.ByCode[CodeFrequency] != 2 || c.ByCode[CodeBusy] != 1 {
		t.Errorf("counters %+v", c)
	}
}

// An API the table does not list gets level 4 (50/s, 1000/min) unless the
// options say otherwise; -1 leaves it unlimited.
func TestDefaultLevel(t *testing.T) {
	for _, tc := range []struct {
		name    string
		level   int
		allowed int // calls in one second before the 429; -1: none refused
	}{
		{"default is level 4", 0, 50},
		{"level 5", 5, 1},
		{"unlimited", -1, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := emulator.NewManualClock(t0)
			s := NewServer(Options{DefaultLevel: tc.level, Clock: clk.Now})
			defer s.Close()
			tok := s.Token("cli_a")
			refusedAt := -1
			for i := 0; i < 60; i++ {
				if a := do(t, s, "GET", "/open-apis/contact/v3/users/ou_1", tok, ""); a.Code == CodeFrequency {
					refusedAt = i
					break
				}
			}
			if refusedAt != tc.allowed {
				t.Fatalf("first refusal after %d calls, want %d", refusedAt, tc.allowed)
			}
		})
	}
}
