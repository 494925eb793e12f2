package wechat_test

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/providers/wechat"
	"github.com/quotaware/throttle/providers/wechat/wechattest"
)

// Forced stable_token refreshes count against ForceRefreshDaily on our
// side: the third of a day of 2 is refused before WeChat sees it, while
// exchanges that force nothing go on.
func TestForcedRefreshesCounted(t *testing.T) {
	s := wechattest.NewServer(wechattest.Options{})
	defer s.Close()
	u, _ := url.Parse(s.URL)
	p := wechat.MustNew(wechat.Config{Hosts: []string{u.Hostname()}, Apps: []wechat.App{{AppID: "wxapp", ForceRefreshDaily: 2}}}).Profile()
	tr := throttle.MustNew(throttle.WithProfiles(p), throttle.WithMaxWait(50*time.Millisecond),
		throttle.WithLogger(slog.New(slog.DiscardHandler)))
	defer tr.Close()
	client := &http.Client{Transport: tr}
	exchange := func(force bool) error {
		b, err := stableToken(client, s.URL, force)
		if err == nil && !strings.Contains(b, `"access_token"`) {
			t.Fatalf("exchange: %s", b)
		}
		return err
	}
	for i := range 2 {
		if err := exchange(true); err != nil {
			t.Fatalf("forced refresh %d: %v", i+1, err)
		}
	}
	if err := exchange(true); !errors.Is(err, throttle.ErrThrottled) {
		t.Fatalf("the third forced refresh of a day of 2: %v, want %v", err, throttle.ErrThrottled)
	}
	for i := range 3 {
		if err := exchange(false); err != nil {
			t.Fatalf("exchange %d without force_refresh: %v", i+1, err)
		}
	}
	if n := s.Fetches("wxapp", "/cgi-bin/stable_token"); n != 5 {
		t.Fatalf("WeChat answered %d exchanges, want 5 (the refused one never sent)", n)
	}
}

func TestForceRefreshDailyValidated(t *testing.T) {
	_, err := wechat.New(wechat.Config{Apps: []wechat.App{{AppID: "wxapp", ForceRefreshDaily: -1}}})
	if err == nil || !strings.Contains(err.Error(), "ForceRefreshDaily") {
		t.Fatalf("a negative ForceRefreshDaily: %v, want an error naming the field", err)
	}
}

// WeChat counted more forced refreshes than the preset (another system
// forcing with the same AppID): its 45009 stops forced refreshes until
// midnight, while exchanges that force nothing, which WeChat still answers,
// go on. Penalising stable_token's own scope (before) left the fleet
// without a token once the kept one ended.
func TestForcedRefreshQuotaErrorStopsOnlyForcedRefreshes(t *testing.T) {
	s := wechattest.NewServer(wechattest.Options{Limits: wechattest.Limits{Daily: map[string]int{}, ForceRefreshDaily: 1}})
	defer s.Close()
	u, _ := url.Parse(s.URL)
	p := wechat.MustNew(wechat.Config{Hosts: []string{u.Hostname()}, Apps: []wechat.App{{AppID: "wxapp"}}}).Profile()
	tr := throttle.MustNew(throttle.WithProfiles(p), throttle.WithMaxWait(50*time.Millisecond), throttle.WithoutRetry(),
		throttle.WithLogger(slog.New(slog.DiscardHandler)))
	defer tr.Close()
	client := &http.Client{Transport: tr}
	exchange := func(force bool) (string, error) { return stableToken(client, s.URL, force) }
	if b, err := exchange(true); err != nil || !strings.Contains(b, `"access_token"`) {
		t.Fatalf("first forced refresh: %s %v", b, err)
	}
	if b, err := exchange(true); err != nil || !strings.Contains(b, `"errcode":45009`) {
		t.Fatalf("second forced refresh, WeChat's count spent: %s %v, want its 45009", b, err)
	}
	if _, err := exchange(true); !errors.Is(err, throttle.ErrPenalized) {
		t.Fatalf("third forced refresh: %v, want %v", err, throttle.ErrPenalized)
	}
	if b, err := exchange(false); err != nil || !strings.Contains(b, `"access_token"`) {
		t.Fatalf("an exchange forcing nothing after the forced refreshes' 45009: %s %v, want a token", b, err)
	}
}

// stableToken sends account wxapp's stable_token exchange through client to
// the emulator at base, forcing a refresh or not, and returns the answer.
func stableToken(client *http.Client, base string, force bool) (string, error) {
	body := `{"grant_type":"client_credential","appid":"wxapp","secret":"s","force_refresh":` + strconv.FormatBool(force) + `}`
	resp, err := client.Post(base+"/cgi-bin/stable_token", "application/json", strings.NewReader(body))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}
