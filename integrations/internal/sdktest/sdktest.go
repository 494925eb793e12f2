package sdktest

import (
	"errors"
	"net/http"
	"net/url"
	"sync"
	"testing"

	"github.com/quotaware/throttle"
)

// network is net/http's default transport as the process started, before
// any test replaced http.DefaultTransport.
var network = http.DefaultTransport

// Redirect returns a transport that sends every request to the emulator at
// target (its scheme and host replace the request's) through net/http's
// original default transport. It stands for the internet: the SDK keeps
// calling its provider's real host, the Transport matches that host with
// the preset's defaults, and only the last hop is redirected.
func Redirect(target string) http.RoundTripper {
	u, err := url.Parse(target)
	if err != nil {
		panic(err)
	}
	return redirect{to: u, base: network}
}

type redirect struct {
	to   *url.URL
	base http.RoundTripper
}

func (r redirect) RoundTrip(req *http.Request) (*http.Response, error) {
	out := req.Clone(req.Context())
	out.URL.Scheme, out.URL.Host, out.Host = r.to.Scheme, r.to.Host, ""
	return r.base.RoundTrip(out)
}

// Fire calls fn n times from workers goroutines at once, as fast as fn
// returns, and gives back every call's error in call order.
func Fire(n, workers int, fn func(i int) error) []error {
	errs := make([]error, n)
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range next {
				errs[i] = fn(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return errs
}

// NoErrors fails the test for every non-nil error.
func NoErrors(t *testing.T, errs []error) {
	t.Helper()
	for i, err := range errs {
		if err != nil {
			t.Errorf("call %d: %v", i, err)
		}
	}
}

// UntilThrottled calls fn back to back until it fails, at most limit times,
// and checks that the failure is throttle.ErrThrottled, found through
// whatever the SDK wrapped around it, and a *throttle.ThrottledError.
func UntilThrottled(t *testing.T, limit int, fn func() error) {
	t.Helper()
	for i := 0; i < limit; i++ {
		err := fn()
		if err == nil {
			continue
		}
		var te *throttle.ThrottledError
		if !errors.Is(err, throttle.ErrThrottled) || !errors.As(err, &te) {
			t.Fatalf("call %d: %v (%T), want throttle.ErrThrottled through the SDK's error", i, err, err)
		}
		t.Logf("call %d refused locally: %v", i, err)
		return
	}
	t.Fatalf("%d calls back to back with no wait allowed, none refused", limit)
}

// Penalized checks that err is throttle.ErrPenalized, found through whatever
// the SDK wrapped around it, and a *throttle.PenaltyError.
func Penalized(t *testing.T, err error) {
	t.Helper()
	var pe *throttle.PenaltyError
	if !errors.Is(err, throttle.ErrPenalized) || !errors.As(err, &pe) {
		t.Fatalf("got %v (%T), want throttle.ErrPenalized through the SDK's error", err, err)
	}
	t.Logf("refused during the penalty: %v", err)
}
