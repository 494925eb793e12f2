package wecomtest

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotaware/throttle/providers/internal/emulator"
)

type answer struct {
	Errcode     int    `json:"errcode"`
	Errmsg      string `json:"errmsg"`
	AccessToken string `json:"access_token"`
}

func get(t *testing.T, s *Server, path string, q url.Values, ip string) answer {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, s.URL+path+"?"+q.Encode(), nil)
	req.Header.Set("X-Test-IP", ip)
	resp, err := s.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var a answer
	if err := json.Unmarshal(raw, &a); err != nil {
		t.Fatalf("body %q: %v", raw, err)
	}
	return a
}

func api(t *testing.T, s *Server, tok, ip string) answer {
	t.Helper()
	return get(t, s, "/cgi-bin/user/get", url.Values{"access_token": {tok}, "userid": {"zhangsan"}}, ip)
}

func headerIP(r *http.Request) string { return r.Header.Get("X-Test-IP") }

var t0 = time.Date(2025, 3, 10, 8, 0, 0, 0, time.UTC)

func TestLimits(t *testing.T) {
	tests := []struct {
		name    string
		limits  Limits
		limit   int
		sameIP  bool // the second caller shares the IP (true) or the corp (false)
		block   time.Duration
		windowd time.Duration
	}{
		{"corp per minute", Limits{CorpPerMinute: 3}, 3, true, time.Minute, time.Minute},
		{"corp per hour", Limits{CorpPerHour: 5}, 5, true, time.Hour, time.Hour},
		{"ip per minute", Limits{IPPerMinute: 4}, 4, false, time.Minute, time.Minute},
		{"ip per hour", Limits{IPPerHour: 2}, 2, false, time.Hour, time.Hour},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := emulator.NewManualClock(t0.Add(tc.windowd - time.Second)) // one second before a window ends
			s := NewServer(Options{Limits: tc.limits, Clock: clk.Now, ClientIP: headerIP})
			defer s.Close()
			tok := s.Token("wwcorp1")
			for i := 0; i < tc.limit; i++ {
				if a := api(t, s, tok, "10.0.0.1"); a.Errcode != 0 {
					t.Fatalf("call %d: %+v", i+1, a)
				}
			}
			a := api(t, s, tok, "10.0.0.1")
			if a.Errcode != CodeFreq || !strings.HasPrefix(a.Errmsg, "api freq out of limit, hint: [") ||
				!strings.Contains(a.Errmsg, "from ip: 10.0.0.1") {
				t.Fatalf("over the limit: %+v", a)
			}
			// The dimension that tripped is blocked; the other is not.
			peerTok, peerIP := s.Token("wwcorp2"), "10.0.0.1"
			if !tc.sameIP {
				peerTok, peerIP = tok, "10.0.0.2"
			}
			if a := api(t, s, peerTok, peerIP); a.Errcode != 0 {
				t.Fatalf("the other dimension: %+v", a)
			}
			if a := get(t, s, "/cgi-bin/department/list", url.Values{"access_token": {tok}}, "10.0.0.1"); a.Errcode != 0 {
				t.Fatalf("another API: %+v", a)
			}
			// The block outlives the window: it lasts tc.block from the trip.
			clk.Add(tc.block - time.Millisecond)
			if a := api(t, s, tok, "10.0.0.1"); a.Errcode != CodeFreq {
				t.Fatalf("still blocked: %+v", a)
			}
			clk.Add(time.Millisecond)
			if a := api(t, s, tok, "10.0.0.1"); a.Errcode != 0 {
				t.Fatalf("after the block: %+v", a)
			}
		})
	}
}

func TestConcurrent(t *testing.T) {
	s := NewServer(Options{Limits: Limits{MaxConcurrent: 2}, Hold: time.Second})
	defer s.Close()
	tok := s.Token("wwcorp1")
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if a := api(t, s, tok, ""); a.Errcode != 0 {
				t.Errorf("in flight: %+v", a)
			}
		})
	}
	deadline := time.Now().Add(2 * time.Second)
	for len(s.Requests()) < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if a := api(t, s, tok, ""); a.Errcode != CodeConcurrent || !strings.HasPrefix(a.Errmsg, "api concurrent out of limit") {
		t.Errorf("third in flight: %+v", a)
	}
	wg.Wait()
	if a := api(t, s, tok, ""); a.Errcode != 0 {
		t.Errorf("after the others finished: %+v", a)
	}
}

func TestGetToken(t *testing.T) {
	clk := emulator.NewManualClock(t0)
	s := NewServer(Options{Corps: map[string][]string{"wwcorp1": {"s1", "s2"}}, Clock: clk.Now})
	defer s.Close()
	tests := []struct {
		corp, secret string
		code         int
	}{
		{"wwcorp1", "s2", 0},
		{"wwcorp1", "bad", CodeInvalidSecret},
		{"nobody", "s1", CodeInvalidCorpID},
		{"", "", CodeInvalidCorpID},
	}
	for _, tc := range tests {
		a := get(t, s, "/cgi-bin/gettoken", url.Values{"corpid": {tc.corp}, "corpsecret": {tc.secret}}, "")
		if a.Errcode != tc.code || (tc.code == 0) != (a.AccessToken != "") {
			t.Errorf("%s/%s: %+v", tc.corp, tc.secret, a)
		}
		if a.AccessToken == "" {
			continue
		}
		if b := api(t, s, a.AccessToken, ""); b.Errcode != 0 {
			t.Errorf("issued token rejected: %+v", b)
		}
		clk.Add(7200 * time.Second)
		if b := api(t, s, a.AccessToken, ""); b.Errcode != CodeExpiredToken {
			t.Errorf("expired token: %+v", b)
		}
	}
	for tok, code := range map[string]int{"": CodeTokenMissing, "forged": CodeBadToken} {
		if a := api(t, s, tok, ""); a.Errcode != code {
			t.Errorf("token %q: %+v", tok, a)
		}
	}
	if r := s.Requests()[0]; r.App != "wwcorp1" || r.Path != "/cgi-bin/gettoken" || r.Code != 0 {
		t.Errorf("record %+v", r)
	}
}

func TestInjectAndTimeScale(t *testing.T) {
	clk := emulator.NewManualClock(t0)
	s := NewServer(Options{Limits: Limits{CorpPerMinute: 1}, Clock: clk.Now, TimeScale: 1000})
	defer s.Close()
	tok := s.Token("wwcorp1")
	s.InjectBusy(1)
	s.Inject(1, http.StatusServiceUnavailable, `{"errcode":6000,"errmsg":"data version conflict"}`)
	for i, want := range []int{CodeBusy, 6000, 0, CodeFreq} {
		if a := api(t, s, tok, ""); a.Errcode != want {
			t.Errorf("call %d: %+v, want %d", i, a, want)
		}
	}
	clk.Add(59 * time.Millisecond) // 59 emulated seconds: still blocked
	if a := api(t, s, tok, ""); a.Errcode != CodeFreq {
		t.Errorf("scaled block ended early: %+v", a)
	}
	clk.Add(time.Millisecond)
	if a := api(t, s, tok, ""); a.Errcode != 0 {
		t.Errorf("scaled block: %+v", a)
	}
	c := s.Counters()
	if c.Total != 6 || c.OK != 2 || c.ByCode[CodeFreq] != 2 || c.ByCode[6000] != 1 || c.ByCode[CodeBusy] != 1 {
		t.Errorf("counters %+v", c)
	}
	if r := s.Requests()[1]; r.Status != http.StatusServiceUnavailable || r.Code != 6000 {
		t.Errorf("injected record %+v", r)
	}
}

// A long app message (a news card of about 100 KB) counts toward its
// member's limit as a short one does: read only to 64 KiB, it decoded to
// no member and was never dropped, hiding any miscount of the preset's.
func TestLongMessageCountsItsMember(t *testing.T) {
	s := NewServer(Options{Limits: Limits{PerMemberPerMinute: 1}, Clock: emulator.NewManualClock(t0).Now})
	defer s.Close()
	tok := s.Token("wwcorp")
	body := `{"touser":"alice","msgtype":"text","agentid":1,"text":{"content":"` + strings.Repeat("x", 100<<10) + `"}}`
	for range 2 {
		resp, err := s.Client().Post(s.URL+"/cgi-bin/message/send?access_token="+tok, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	reqs := s.Requests()
	if len(reqs) != 2 || reqs[1].Dropped != 1 {
		t.Fatalf("requests %+v, want the second long message dropped for alice", reqs)
	}
}
