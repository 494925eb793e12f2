package throttle_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/rule"
	"github.com/quotaware/throttle/providers"
)

// A refusal the provider bills against none of its calendar quotas
// (Verdict.Unbilled: DingTalk's QPS refusals and the month) gives the
// day's slot back, retries included, before the call returns. Before,
// every refused attempt kept its slot, and a day's or a month's quota ran
// out locally for calls the provider never billed.
func TestAnUnbilledRefusalGivesTheDayBack(t *testing.T) {
	var refuse atomic.Bool
	refuse.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if refuse.Load() {
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	t.Cleanup(srv.Close)
	day := rule.Must(rule.NewCalendar("day", 2, rule.Day, time.UTC))
	pace := rule.Must(rule.New("pace", 1000, time.Second))
	profile := providers.Profile{
		Name:  "metered",
		Match: func(*http.Request) bool { return true },
		Route: func(*http.Request) (providers.Route, error) {
			return providers.Route{API: "/", Rules: []rule.Rule{day, pace}}, nil
		},
		Classify: func(_ *http.Request, resp *http.Response, _ *providers.Route) providers.Verdict {
			if resp.StatusCode == http.StatusTooManyRequests {
				return providers.Verdict{Kind: providers.Transient, Code: "qps", NotProcessed: true, Unbilled: true}
			}
			return providers.Verdict{Kind: providers.OK}
		},
	}
	mem := limiter.NewMemory()
	tr := throttle.MustNew(throttle.WithProfiles(profile), throttle.WithLimiter(mem), throttle.WithLogger(quiet),
		throttle.WithoutTelemetry(), throttle.WithRetry(throttle.RetryPolicy{MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond}))
	t.Cleanup(func() { tr.Close() })
	client := &http.Client{Transport: tr}
	call := func() (int, error) {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL, http.NoBody)
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	// Three calls of three attempts each, all refused: nine attempts on a
	// day of two.
	for i := range 3 {
		if status, err := call(); err != nil || status != http.StatusTooManyRequests {
			t.Fatalf("refused call %d: status %d, error %v; want the provider's 429 after the retries", i+1, status, err)
		}
	}
	used, err := mem.CalendarUsed(context.Background(), profile.Name, []rule.Rule{day})
	if err != nil {
		t.Fatal(err)
	}
	if used[0] != 0 {
		t.Fatalf("%d of the day counted for refusals the provider never billed, want 0", used[0])
	}
	refuse.Store(false)
	for i := range 2 {
		if status, err := call(); err != nil || status != http.StatusOK {
			t.Fatalf("call %d of the day's 2: status %d, error %v", i+1, status, err)
		}
	}
	if _, err := call(); !errors.Is(err, throttle.ErrThrottled) {
		t.Fatalf("a third call of the day: %v, want ErrThrottled", err)
	}
}
