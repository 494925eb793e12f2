package feishu_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/providers/feishu"
	"github.com/quotaware/throttle/providers/feishu/feishutest"
)

func newClient(t *testing.T, s *feishutest.Server, cfg feishu.Config) *http.Client {
	t.Helper()
	u, _ := url.Parse(s.URL)
	cfg.Apps[0].AppID, cfg.Hosts = "cli_test", []string{u.Hostname()}
	tr := throttle.MustNew(throttle.WithProfiles(feishu.MustNew(cfg).Profile()), throttle.WithMaxWait(3*time.Second),
		throttle.WithLogger(slog.New(slog.DiscardHandler)))
	t.Cleanup(func() { tr.Close() })
	return &http.Client{Transport: tr}
}

func send(client *http.Client, s *feishutest.Server, tok, path string) error {
	req, _ := http.NewRequest(http.MethodPost, s.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := client.Do(req)
	if err == nil {
		resp.Body.Close()
	}
	return err
}

// TestTransportPacing sends faster than a per-second level allows, with
// jittered latency: the profile paces the calls so that none is refused.
func TestTransportPacing(t *testing.T) {
	if testing.Short() {
		t.Skip("takes two seconds")
	}
	s := feishutest.NewServer(feishutest.Options{
		Levels:     map[int]feishutest.Level{4: {PerSecond: 5, PerMinute: 1000}},
		LatencyMin: time.Millisecond, LatencyMax: 30 * time.Millisecond,
	})
	defer s.Close()
	client := newClient(t, s, feishu.Config{Apps: []feishu.App{{Levels: map[int]feishu.Level{4: {PerSecond: 5, PerMinute: 1000}}}}})
	tok := s.Token("cli_test")
	for i := range 12 {
		if err := send(client, s, tok, "/open-apis/im/v1/messages?receive_id_type=chat_id"); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if c := s.Counters(); c.OK != 12 {
		t.Errorf("emulator refused some: %+v", c)
	}
}

// TestTransportMonthly checks that 99991403, though a 429, stops every API
// of the app instead of being retried.
func TestTransportMonthly(t *testing.T) {
	s := feishutest.NewServer(feishutest.Options{MonthlyQuota: 2})
	defer s.Close()
	client := newClient(t, s, feishu.Config{Apps: []feishu.App{{}}})
	tok := s.Token("cli_test")
	for i := range 3 { // the third answers 99991403
		if err := send(client, s, tok, "/open-apis/im/v1/messages"); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if err := send(client, s, tok, "/open-apis/contact/v3/users"); !errors.Is(err, throttle.ErrPenalized) {
		t.Fatalf("another API after 99991403: %v", err)
	}
	if c := s.Counters(); c.Total != 3 || c.ByCode[feishutest.CodeMonthlyQuota] != 1 {
		t.Errorf("emulator saw %+v", c)
	}
}

// The free edition's monthly quota is the tenant's: two internal apps of
// one tenant share it, so the call past it is refused here, by whichever
// app, and Feishu never answers 99991403 (counted per app, the two apps
// were let through twice the tenant's quota).
func TestTransportMonthlyQuotaPerTenant(t *testing.T) {
	s := feishutest.NewServer(feishutest.Options{MonthlyQuota: 3, Tenants: map[string]string{"cli_a": "corp", "cli_b": "corp"}})
	defer s.Close()
	u, _ := url.Parse(s.URL)
	cfg := feishu.Config{Hosts: []string{u.Hostname()}, Apps: []feishu.App{
		{AppID: "cli_a", FreeEdition: true, MonthlyQuota: 3}, {AppID: "cli_b", FreeEdition: true, MonthlyQuota: 3}}}
	tr := throttle.MustNew(throttle.WithProfiles(feishu.MustNew(cfg).Profile()), throttle.WithMaxWait(time.Second),
		throttle.WithLogger(slog.New(slog.DiscardHandler)))
	t.Cleanup(func() { tr.Close() })
	client := &http.Client{Transport: tr}
	call := func(app string) error {
		req, _ := http.NewRequestWithContext(throttle.ContextWithApp(context.Background(), app), http.MethodPost, s.URL+"/open-apis/contact/v3/users", nil)
		req.Header.Set("Authorization", "Bearer "+s.Token(app))
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	for i, app := range []string{"cli_a", "cli_b", "cli_a"} {
		if err := call(app); err != nil {
			t.Fatalf("call %d by %s: %v", i, app, err)
		}
	}
	if err := call("cli_b"); !errors.Is(err, throttle.ErrThrottled) {
		t.Fatalf("the tenant's fourth call: %v, want it refused here", err)
	}
	if c := s.Counters(); c.Total != 3 || c.ByCode[feishutest.CodeMonthlyQuota] != 0 {
		t.Errorf("emulator saw %+v, want 3 calls and no 99991403", c)
	}
}
