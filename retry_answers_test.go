package throttle_test

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/providers"
)

// A base transport may answer with no body at all (net/http.Client accepts
// a nil Body): a retried answer of that kind is let go, not read. It used
// to panic in the caller's goroutine.
func TestRetryAnswerWithoutBody(t *testing.T) {
	var sends atomic.Int64
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if sends.Add(1) == 1 {
			return &http.Response{StatusCode: http.StatusServiceUnavailable, Header: http.Header{}, Request: r}, nil
		}
		return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("ok")), Request: r}, nil
	})
	tr := throttle.MustNew(throttle.WithBase(base), throttle.WithLimiter(limiter.NewMemory()),
		throttle.WithProfiles(testProfile("p", mustRule(t, 100, time.Second))),
		throttle.WithRetry(throttle.RetryPolicy{MaxAttempts: 3, MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond}),
		throttle.WithoutTelemetry())
	resp, err := (&http.Client{Transport: tr}).Get("http://x.test/a")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || sends.Load() != 2 {
		t.Fatalf("status %d after %d sends, want 200 after 2", resp.StatusCode, sends.Load())
	}
}

// A quota verdict that stops nothing (a custom profile's: no scope, no
// end) backs off as a transient failure does. It used to be resent at
// once, MaxAttempts times.
func TestRetryQuotaWithoutEndBacksOff(t *testing.T) {
	var mu sync.Mutex
	var sent []time.Time
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		mu.Lock()
		sent = append(sent, time.Now())
		mu.Unlock()
		return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"X-Test-Quota": {"1"}}, Body: io.NopCloser(strings.NewReader("q")), Request: r}, nil
	})
	p := testProfile("p", mustRule(t, 1000, time.Second))
	route, classify := p.Route, p.Classify
	p.Route = func(r *http.Request) (providers.Route, error) {
		rt, err := route(r)
		rt.Scopes = nil
		return rt, err
	}
	p.Classify = func(r *http.Request, resp *http.Response, rt *providers.Route) providers.Verdict {
		v := classify(r, resp, rt)
		v.Until = time.Time{}
		return v
	}
	const minBackoff = 50 * time.Millisecond
	tr := throttle.MustNew(throttle.WithBase(base), throttle.WithLimiter(limiter.NewMemory()), throttle.WithProfiles(p),
		throttle.WithRetry(throttle.RetryPolicy{MaxAttempts: 3, MinBackoff: minBackoff, MaxBackoff: minBackoff}),
		throttle.WithoutTelemetry())
	resp, err := (&http.Client{Transport: tr}).Get("http://x.test/a")
	if err == nil {
		resp.Body.Close()
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sent) != 3 {
		t.Fatalf("%d sends, want 3", len(sent))
	}
	for i := 1; i < len(sent); i++ {
		// Full jitter draws from [min, min]: every gap is at least min.
		if gap := sent[i].Sub(sent[i-1]); gap < minBackoff {
			t.Errorf("send %d came %v after the one before, want at least the backoff %v", i+1, gap, minBackoff)
		}
	}
}
