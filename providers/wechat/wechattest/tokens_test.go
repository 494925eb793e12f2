package wechattest

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/quotaware/throttle/providers/internal/emulator"
)

// A second /cgi-bin/token fetch issues a new token; the previous one keeps
// working through the grace period, then answers 40001. stable_token
// returns the same token until a forced refresh replaces it. A revoked
// token answers 40001 at once.
func TestSecondExchange(t *testing.T) {
	clock := emulator.NewManualClock(time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC))
	s := NewServer(Options{Clock: clock.Now})
	defer s.Close()
	q := url.Values{"appid": {"wxapp1"}, "secret": {"s"}}
	first := call(t, s, http.MethodGet, "/cgi-bin/token", q, "").AccessToken
	second := call(t, s, http.MethodGet, "/cgi-bin/token", q, "").AccessToken
	if first == "" || first == second {
		t.Fatalf("second fetch: %q after %q, want a new token", second, first)
	}
	if code := api(t, s, first, "/cgi-bin/user/info"); code != 0 {
		t.Fatalf("replaced token within its grace: errcode %d, want 0", code)
	}
	clock.Add(defaultGrace)
	if code := api(t, s, first, "/cgi-bin/user/info"); code != CodeInvalidToken {
		t.Fatalf("replaced token after its grace: errcode %d, want %d", code, CodeInvalidToken)
	}
	if code := api(t, s, second, "/cgi-bin/user/info"); code != 0 {
		t.Fatalf("newest token: errcode %d, want 0", code)
	}
	if n := s.Fetches("wxapp1", "/cgi-bin/token"); n != 2 {
		t.Fatalf("Fetches = %d, want 2", n)
	}

	body := `{"grant_type":"client_credential","appid":"wxapp1","secret":"s"}`
	st1 := call(t, s, http.MethodPost, "/cgi-bin/stable_token", nil, body)
	clock.Add(time.Hour)
	st2 := call(t, s, http.MethodPost, "/cgi-bin/stable_token", nil, body)
	if st1.AccessToken != st2.AccessToken || st2.ExpiresIn != 3600 {
		t.Fatalf("stable_token an hour on: %+v after %+v, want the same token with 3600 s left", st2, st1)
	}
	forced := call(t, s, http.MethodPost, "/cgi-bin/stable_token", nil,
		`{"grant_type":"client_credential","appid":"wxapp1","secret":"s","force_refresh":true}`)
	if forced.AccessToken == st1.AccessToken {
		t.Fatal("forced stable_token returned the same token")
	}

	s.Revoke(second)
	if code := api(t, s, second, "/cgi-bin/user/info"); code != CodeInvalidToken {
		t.Fatalf("revoked token: errcode %d, want %d", code, CodeInvalidToken)
	}
}

// A forced stable_token refresh renews the token, one within 30 s of the
// last renewal returns the token in force uncounted, and the 21st renewal
// of a Beijing day answers 45009 until midnight.
func TestForcedRefreshes(t *testing.T) {
	clock := emulator.NewManualClock(t0.Add(-12 * time.Hour)) // 11:59 in Beijing
	s := NewServer(Options{Clock: clock.Now})
	defer s.Close()
	force := `{"grant_type":"client_credential","appid":"wxapp1","secret":"s","force_refresh":true}`
	prev := call(t, s, http.MethodPost, "/cgi-bin/stable_token", nil, force).AccessToken
	if again := call(t, s, http.MethodPost, "/cgi-bin/stable_token", nil, force).AccessToken; again != prev {
		t.Fatalf("forced refresh within 30 s: %q after %q, want the token in force", again, prev)
	}
	for i := 2; i <= 20; i++ {
		clock.Add(30 * time.Second)
		a := call(t, s, http.MethodPost, "/cgi-bin/stable_token", nil, force)
		if a.Errcode != 0 || a.AccessToken == prev {
			t.Fatalf("forced refresh %d, 30 s after the last: %+v, want a new token", i, a)
		}
		prev = a.AccessToken
	}
	clock.Add(30 * time.Second)
	if a := call(t, s, http.MethodPost, "/cgi-bin/stable_token", nil, force); a.Errcode != CodeDailyQuota {
		t.Fatalf("the 21st forced refresh of the day: %+v, want %d", a, CodeDailyQuota)
	}
	if a := call(t, s, http.MethodPost, "/cgi-bin/stable_token", nil, force[:len(force)-22]+"}"); a.Errcode != 0 || a.AccessToken != prev {
		t.Fatalf("an exchange without force_refresh after the day's forced ones: %+v, want the token in force", a)
	}
	clock.Add(24 * time.Hour)
	if a := call(t, s, http.MethodPost, "/cgi-bin/stable_token", nil, force); a.Errcode != 0 || a.AccessToken == prev {
		t.Fatalf("a forced refresh the next day: %+v, want a new token", a)
	}
}
