package wechattest

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/quotaware/throttle/providers/internal/emulator"
)

type answer struct {
	Errcode     int    `json:"errcode"`
	Errmsg      string `json:"errmsg"`
	AccessToken string `json:"access_token"`
	ExpiresIn   int    `json:"expires_in"`
}

func call(t *testing.T, s *Server, method, path string, q url.Values, body string) answer {
	t.Helper()
	req, err := http.NewRequest(method, s.URL+path+"?"+q.Encode(), strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := s.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var a answer
	if err := json.Unmarshal(raw, &a); err != nil {
		t.Fatalf("%s %s: body %q: %v", method, path, raw, err)
	}
	if a.Errcode != 0 && !strings.Contains(a.Errmsg, " rid: ") {
		t.Errorf("errmsg %q lacks the rid suffix", a.Errmsg)
	}
	return a
}

func api(t *testing.T, s *Server, tok, path string) int {
	t.Helper()
	return call(t, s, http.MethodPost, path, url.Values{"access_token": {tok}}, "{}").Errcode
}

// Beijing midnight is 16:00 UTC; start the clock a little before it.
var t0 = time.Date(2025, 3, 10, 15, 59, 0, 0, time.UTC)

func TestLimits(t *testing.T) {
	tests := []struct {
		name   string
		limits Limits
		path   string
		limit  int
		code   int
		wait   time.Duration // from the first call until the window resets
		before time.Duration // still rejected this long after the first call
	}{
		{"daily quota until midnight Beijing", Limits{Daily: map[string]int{"/cgi-bin/user/info": 3}},
			"/cgi-bin/user/info", 3, CodeDailyQuota, time.Minute, 59 * time.Second},
		{"per-minute limit", Limits{PerMinute: map[string]int{"/cgi-bin/message/custom/send": 2}},
			"/cgi-bin/message/custom/send", 2, CodeMinuteQuota, time.Minute, 59*time.Second + 999*time.Millisecond},
		{"mini program minute limit", Limits{MiniPerMinute: map[string]int{"/wxa/msg_sec_check": 4}},
			"/wxa/msg_sec_check", 4, CodeMiniFrequency, time.Minute, 30 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := emulator.NewManualClock(t0)
			s := NewServer(Options{Limits: tc.limits, Clock: clk.Now})
			defer s.Close()
			tok := s.Token("wxapp1")
			other := s.Token("wxapp2")
			for i := 0; i < tc.limit; i++ {
				if c := api(t, s, tok, tc.path); c != 0 {
					t.Fatalf("call %d: errcode %d, want 0", i+1, c)
				}
			}
			if c := api(t, s, tok, tc.path); c != tc.code {
				t.Fatalf("call over the limit: errcode %d, want %d", c, tc.code)
			}
			if c := api(t, s, other, tc.path); c != 0 {
				t.Fatalf("another app shares the quota: errcode %d", c)
			}
			if c := api(t, s, tok, "/cgi-bin/other"); c != 0 {
				t.Fatalf("another API shares the quota: errcode %d", c)
			}
			clk.Add(tc.before)
			if c := api(t, s, tok, tc.path); c != tc.code {
				t.Fatalf("before the reset: errcode %d, want %d", c, tc.code)
			}
			clk.Set(t0.Add(tc.wait))
			if c := api(t, s, tok, tc.path); c != 0 {
				t.Fatalf("after the reset: errcode %d, want 0", c)
			}
			cs := s.Counters()
			if cs.ByCode[tc.code] != 2 {
				t.Errorf("counters %+v: want 2 × %d", cs, tc.code)
			}
		})
	}
}

func TestTokenEndpoints(t *testing.T) {
	clk := emulator.NewManualClock(t0)
	s := NewServer(Options{
		Apps:   map[string]string{"wxapp1": "secret"},
		Clock:  clk.Now,
		Limits: Limits{Daily: map[string]int{"/cgi-bin/token": 1}, PerMinute: map[string]int{"/cgi-bin/stable_token": 1}},
	})
	defer s.Close()
	tokenQ := url.Values{"grant_type": {"client_credential"}, "appid": {"wxapp1"}, "secret": {"secret"}}
	a := call(t, s, http.MethodGet, "/cgi-bin/token", tokenQ, "")
	if a.Errcode != 0 || a.AccessToken == "" {
		t.Fatalf("token: %+v", a)
	}
	if c := api(t, s, a.AccessToken, "/cgi-bin/user/info"); c != 0 {
		t.Fatalf("issued token rejected: %d", c)
	}
	if a := call(t, s, http.MethodGet, "/cgi-bin/token", tokenQ, ""); a.Errcode != CodeDailyQuota {
		t.Fatalf("second token of the day: %+v", a)
	}
	bad := url.Values{"appid": {"wxapp1"}, "secret": {"nope"}}
	if a := call(t, s, http.MethodGet, "/cgi-bin/token", bad, ""); a.Errcode != CodeInvalidSecret {
		t.Fatalf("wrong secret: %+v", a)
	}
	stable := `{"grant_type":"client_credential","appid":"wxapp1","secret":"secret"}`
	if a := call(t, s, http.MethodPost, "/cgi-bin/stable_token", nil, stable); a.Errcode != 0 || a.AccessToken == "" {
		t.Fatalf("stable token: %+v", a)
	}
	if a := call(t, s, http.MethodPost, "/cgi-bin/stable_token", nil, stable); a.Errcode != CodeMinuteQuota {
		t.Fatalf("stable token over its minute limit: %+v", a)
	}
	cases := []struct {
		tok  string
		code int
	}{{"", CodeTokenMissing}, {"forged", CodeInvalidToken}}
	for _, c := range cases {
		if got := api(t, s, c.tok, "/cgi-bin/user/info"); got != c.code {
			t.Errorf("token %q: errcode %d, want %d", c.tok, got, c.code)
		}
	}
	clk.Add(7200 * time.Second)
	if c := api(t, s, a.AccessToken, "/cgi-bin/user/info"); c != CodeExpiredToken {
		t.Fatalf("expired token: %d", c)
	}
}

func TestInjectAndRecord(t *testing.T) {
	clk := emulator.NewManualClock(t0)
	s := NewServer(Options{Clock: clk.Now, Limits: Limits{Daily: map[string]int{"/cgi-bin/user/info": 1}}})
	defer s.Close()
	tok := s.Token("wxapp1")
	s.InjectBusy(2)
	s.Inject(1, http.StatusBadGateway, `{"errcode":45009,"errmsg":"reach max api daily quota limit rid: x"}`)
	for i, want := range []int{CodeBusy, CodeBusy, CodeDailyQuota, 0, CodeDailyQuota} {
		if c := api(t, s, tok, "/cgi-bin/user/info"); c != want {
			t.Errorf("call %d: errcode %d, want %d", i, c, want)
		}
	}
	rs := s.Requests()
	if len(rs) != 5 {
		t.Fatalf("%d records", len(rs))
	}
	if r := rs[2]; r.Status != http.StatusBadGateway || r.Code != CodeDailyQuota || r.App != "" {
		t.Errorf("injected record %+v", r)
	}
	if r := rs[3]; r.Status != 200 || r.Code != 0 || r.App != "wxapp1" || r.Path != "/cgi-bin/user/info" || r.Method != "POST" || !r.At.Equal(t0) {
		t.Errorf("record %+v", r)
	}
	rs[0].Code = 12345
	if s.Requests()[0].Code == 12345 {
		t.Error("Requests returned the server's own slice")
	}
	s.ClearQuota("wxapp1")
	if c := api(t, s, tok, "/cgi-bin/user/info"); c != 0 {
		t.Errorf("after ClearQuota: %d", c)
	}
}

func TestTimeScale(t *testing.T) {
	clk := emulator.NewManualClock(t0)
	s := NewServer(Options{Clock: clk.Now, TimeScale: 1000, Limits: Limits{PerMinute: map[string]int{"/cgi-bin/user/info": 1}}})
	defer s.Close()
	tok := s.Token("wxapp1")
	clk.Add(1 * time.Millisecond) // emulated 15:59:01
	if c := api(t, s, tok, "/cgi-bin/user/info"); c != 0 {
		t.Fatal(c)
	}
	if c := api(t, s, tok, "/cgi-bin/user/info"); c != CodeMinuteQuota {
		t.Fatal(c)
	}
	clk.Add(59 * time.Millisecond) // emulated 16:00:00: a new minute
	if got, want := s.Now(), t0.Add(time.Minute); !got.Equal(want) {
		t.Fatalf("emulated now %v, want %v", got, want)
	}
	if c := api(t, s, tok, "/cgi-bin/user/info"); c != 0 {
		t.Fatalf("after a scaled minute: %d", c)
	}
	if r := s.Requests()[2]; !r.At.Equal(t0.Add(60*time.Millisecond)) || !r.Emulated.Equal(t0.Add(time.Minute)) {
		t.Errorf("record times %v / %v", r.At, r.Emulated)
	}
}

func TestLatency(t *testing.T) {
	s := NewServer(Options{LatencyMin: 20 * time.Millisecond, LatencyMax: 30 * time.Millisecond})
	defer s.Close()
	tok := s.Token("wxapp1")
	start := time.Now()
	api(t, s, tok, "/cgi-bin/user/info")
	arrival := s.Requests()[0].At.Sub(start)
	if arrival < 20*time.Millisecond || arrival > time.Second {
		t.Errorf("arrival after %v, want 20..30ms", arrival)
	}
}
