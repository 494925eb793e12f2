package wechattest

import (
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/quotaware/throttle/providers/internal/emulator"
)

const (
	infoPath = "/cgi-bin/user/info"
	menuPath = "/cgi-bin/menu/create"
	sendPath = "/cgi-bin/message/custom/send"
)

// clearLimits give two APIs a daily quota of one call and a third a
// per-minute limit of one; the clear endpoints get a daily quota of one
// too, which they must not be held to.
func clearLimits() Limits {
	return Limits{
		Daily:     map[string]int{infoPath: 1, menuPath: 1, ClearQuotaPath: 1, QuotaClearPath: 1},
		PerMinute: map[string]int{sendPath: 1},
	}
}

func clearQuota(t *testing.T, s *Server, tok, appID string) int {
	t.Helper()
	return call(t, s, http.MethodPost, ClearQuotaPath, url.Values{"access_token": {tok}}, `{"appid":"`+appID+`"}`).Errcode
}

func quotaClear(t *testing.T, s *Server, tok, path string) int {
	t.Helper()
	return call(t, s, http.MethodPost, QuotaClearPath, url.Values{"access_token": {tok}}, `{"cgi_path":"`+path+`"}`).Errcode
}

// spendAll makes tok's calls to each path until the daily or minute limit
// refuses one.
func spendAll(t *testing.T, s *Server, tok string, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if c := api(t, s, tok, p); c != 0 {
			t.Fatalf("first call to %s: errcode %d, want 0", p, c)
		}
		if c := api(t, s, tok, p); c == 0 {
			t.Fatalf("second call to %s went through, want it refused", p)
		}
	}
}

// A clear resets every daily count of the token's account and nothing
// else: another account's counts and the per-minute counts stay, and the
// clear itself is not held to a daily quota.
func TestClearQuotaResetsDailyCounts(t *testing.T) {
	s := NewServer(Options{Limits: clearLimits(), Clock: emulator.NewManualClock(t0).Now})
	defer s.Close()
	tok, other := s.Token("wxapp1"), s.Token("wxapp2")
	spendAll(t, s, tok, infoPath, menuPath, sendPath)
	spendAll(t, s, other, infoPath)

	for i := range 2 {
		if c := clearQuota(t, s, tok, "wxapp1"); c != 0 {
			t.Fatalf("clear %d: errcode %d, want 0", i+1, c)
		}
	}
	for _, p := range []string{infoPath, menuPath} {
		if c := api(t, s, tok, p); c != 0 {
			t.Errorf("%s after the clear: errcode %d, want 0", p, c)
		}
	}
	if c := api(t, s, tok, sendPath); c != CodeMinuteQuota {
		t.Errorf("per-minute limit after the clear: errcode %d, want %d", c, CodeMinuteQuota)
	}
	if c := api(t, s, other, infoPath); c != CodeDailyQuota {
		t.Errorf("another account after the clear: errcode %d, want %d", c, CodeDailyQuota)
	}

	var clears []Request
	for _, r := range s.Requests() {
		if r.Path == ClearQuotaPath {
			clears = append(clears, r)
		}
	}
	if len(clears) != 2 || clears[0].Code != 0 || clears[0].App != "wxapp1" || clears[0].API != ClearQuotaPath || clears[0].Status != http.StatusOK {
		t.Errorf("clear records %+v", clears)
	}
}

// quota/clear resets the one API it names; a path without a daily quota
// answers 76021 and takes nothing from the month's allowance.
func TestQuotaClearResetsOnePath(t *testing.T) {
	s := NewServer(Options{Limits: clearLimits(), Clock: emulator.NewManualClock(t0).Now})
	defer s.Close()
	tok, other := s.Token("wxapp1"), s.Token("wxapp2")
	spendAll(t, s, tok, infoPath, menuPath)
	spendAll(t, s, other, infoPath)

	for _, p := range []string{"", "/cgi-bin/unknown", sendPath} {
		if c := quotaClear(t, s, tok, p); c != CodeQuotaBadPath {
			t.Errorf("quota/clear of %q: errcode %d, want %d", p, c, CodeQuotaBadPath)
		}
	}
	for i := range 2 {
		if c := quotaClear(t, s, tok, infoPath); c != 0 {
			t.Fatalf("quota/clear %d: errcode %d, want 0", i+1, c)
		}
	}
	if c := api(t, s, tok, infoPath); c != 0 {
		t.Errorf("the cleared API: errcode %d, want 0", c)
	}
	if c := api(t, s, tok, menuPath); c != CodeDailyQuota {
		t.Errorf("another API: errcode %d, want %d", c, CodeDailyQuota)
	}
	if c := api(t, s, other, infoPath); c != CodeDailyQuota {
		t.Errorf("another account: errcode %d, want %d", c, CodeDailyQuota)
	}
	for i := 2; i < QuotaClearMonthly; i++ {
		if c := quotaClear(t, s, tok, infoPath); c != 0 {
			t.Fatalf("quota/clear %d: errcode %d, want 0", i+1, c)
		}
	}
	if c := quotaClear(t, s, tok, infoPath); c != CodeClearQuotaLimit {
		t.Fatalf("quota/clear %d of the month: errcode %d, want %d", QuotaClearMonthly+1, c, CodeClearQuotaLimit)
	}
	if c := clearQuota(t, s, tok, "wxapp1"); c != 0 {
		t.Fatalf("clear_quota after quota/clear's allowance: errcode %d, want 0 (separate allowances)", c)
	}
}

// The 11th clear of a Beijing month answers 48006 and clears nothing; the
// allowance starts again when the month turns in Beijing, which is hours
// before it turns in UTC. TimeScale 1000 checks that the month is read on
// the emulated clock.
func TestClearQuotaMonthlyAllowance(t *testing.T) {
	start := time.Date(2025, 3, 31, 15, 0, 0, 0, time.UTC) // 23:00 on 31 March in Beijing
	for _, scale := range []float64{1, 1000} {
		t.Run(fmt.Sprintf("TimeScale %g", scale), func(t *testing.T) {
			clk := emulator.NewManualClock(start)
			s := NewServer(Options{Limits: clearLimits(), Clock: clk.Now, TimeScale: scale})
			defer s.Close()
			tok := s.Token("wxapp1")
			for i := range ClearQuotaMonthly {
				spendAll(t, s, tok, infoPath)
				if c := clearQuota(t, s, tok, "wxapp1"); c != 0 {
					t.Fatalf("clear %d: errcode %d, want 0", i+1, c)
				}
			}
			spendAll(t, s, tok, infoPath)
			if c := clearQuota(t, s, tok, "wxapp1"); c != CodeClearQuotaLimit {
				t.Fatalf("clear %d of the month: errcode %d, want %d", ClearQuotaMonthly+1, c, CodeClearQuotaLimit)
			}
			if c := api(t, s, tok, infoPath); c != CodeDailyQuota {
				t.Fatalf("after the refused clear: errcode %d, want %d", c, CodeDailyQuota)
			}
			if n := s.Counters().ByCode[CodeClearQuotaLimit]; n != 1 {
				t.Errorf("%d answers %d, want 1", n, CodeClearQuotaLimit)
			}

			// An hour of emulated time: 00:00 on 1 April in Beijing, still
			// 31 March in UTC.
			clk.Add(time.Duration(float64(time.Hour) / scale))
			// The new day has reset the daily count; spend it again so that
			// the clear has something to clear.
			spendAll(t, s, tok, infoPath)
			if c := clearQuota(t, s, tok, "wxapp1"); c != 0 {
				t.Fatalf("first clear of the next month: errcode %d, want 0", c)
			}
			if c := api(t, s, tok, infoPath); c != 0 {
				t.Fatalf("after the next month's clear: errcode %d, want 0", c)
			}
		})
	}
}

// clear_quota must name the token's own account.
func TestClearQuotaWrongAppID(t *testing.T) {
	s := NewServer(Options{Limits: clearLimits(), Clock: emulator.NewManualClock(t0).Now})
	defer s.Close()
	tok := s.Token("wxapp1")
	s.Token("wxapp2")
	spendAll(t, s, tok, infoPath)
	for _, body := range []string{`{"appid":"wxapp2"}`, `{}`, ``} {
		a := call(t, s, http.MethodPost, ClearQuotaPath, url.Values{"access_token": {tok}}, body)
		if a.Errcode != CodeInvalidAppID {
			t.Errorf("body %q: errcode %d, want %d", body, a.Errcode, CodeInvalidAppID)
		}
	}
	if c := api(t, s, tok, infoPath); c != CodeDailyQuota {
		t.Errorf("after the refused clears: errcode %d, want %d", c, CodeDailyQuota)
	}
}

// Both clears check the token as every API does; a refused token takes
// nothing from the allowance.
func TestClearQuotaBadToken(t *testing.T) {
	clk := emulator.NewManualClock(t0)
	s := NewServer(Options{Limits: clearLimits(), Clock: clk.Now})
	defer s.Close()
	expired := s.Token("wxapp1")
	clk.Add(7200 * time.Second)
	revoked := s.Token("wxapp1")
	s.Revoke(revoked)
	tok := s.Token("wxapp1")
	spendAll(t, s, tok, infoPath)
	cases := []struct {
		tok  string
		code int
	}{{"", CodeTokenMissing}, {"forged", CodeInvalidToken}, {revoked, CodeInvalidToken}, {expired, CodeExpiredToken}}
	for _, c := range cases {
		for range ClearQuotaMonthly {
			if got := clearQuota(t, s, c.tok, "wxapp1"); got != c.code {
				t.Fatalf("clear_quota with token %q: errcode %d, want %d", c.tok, got, c.code)
			}
		}
		if got := quotaClear(t, s, c.tok, infoPath); got != c.code {
			t.Errorf("quota/clear with token %q: errcode %d, want %d", c.tok, got, c.code)
		}
	}
	if c := api(t, s, tok, infoPath); c != CodeDailyQuota {
		t.Fatalf("after the refused clears: errcode %d, want %d", c, CodeDailyQuota)
	}
	if c := clearQuota(t, s, tok, "wxapp1"); c != 0 {
		t.Fatalf("a valid token after the refused ones: errcode %d, want 0", c)
	}
}
