package wechat_test

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
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
		body := `{"grant_type":"client_credential","appid":"wxapp","secret":"s","force_refresh":` + map[bool]string{true: "true", false: "false"}[force] + `}`
		resp, err := client.Post(s.URL+"/cgi-bin/stable_token", "application/json", strings.NewReader(body))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if !strings.Contains(string(b), `"access_token"`) {
			t.Fatalf("exchange: %s", b)
		}
		return nil
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
