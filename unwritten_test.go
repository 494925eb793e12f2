package throttle_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/rule"
	"github.com/quotaware/throttle/providers"
)

// dnsFailure fails every request as a resolver that cannot find the host
// does, reporting nothing through httptrace.
type dnsFailure struct{}

func (dnsFailure) RoundTrip(req *http.Request) (*http.Response, error) {
	return nil, &net.DNSError{Err: "no such host", Name: req.URL.Hostname(), IsNotFound: true}
}

// An attempt that never reached the provider (a refused dial, a host that
// does not resolve) gives its day's slot back, retries included: the
// provider counted nothing. Before, every attempt of an egress or DNS
// outage kept its slot, and a day's or a month's quota ran out locally
// while the provider had counted nothing.
func TestAnAttemptNeverSentCountsNothing(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + closed.Addr().String()
	closed.Close() // a port nobody listens on: every dial is refused
	live := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(live.Close)

	day := rule.Must(rule.NewCalendar("day", 2, rule.Day, time.UTC))
	profile := providers.Profile{
		Name:  "metered",
		Match: func(*http.Request) bool { return true },
		Route: func(*http.Request) (providers.Route, error) {
			return providers.Route{API: "/", Rules: []rule.Rule{day}}, nil
		},
	}
	// A TLS handshake with a server that speaks plain HTTP fails after the
	// dial and before the write: only the trace tells.
	plain := "https://" + live.Listener.Addr().String()
	for _, tc := range []struct {
		name   string
		base   http.RoundTripper // for the failing calls
		down   string
		method string
	}{
		{"refused dial, GET", http.DefaultTransport, down, http.MethodGet},
		{"refused dial, POST", http.DefaultTransport, down, http.MethodPost},
		{"TLS handshake failed, GET", http.DefaultTransport, plain, http.MethodGet},
		{"no such host, untraced", dnsFailure{}, down, http.MethodGet},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := limiter.NewMemory()
			bases := map[string]http.RoundTripper{"down": tc.base, "live": http.DefaultTransport}
			tr := throttle.MustNew(throttle.WithProfiles(profile), throttle.WithLimiter(mem), throttle.WithLogger(quiet),
				throttle.WithoutTelemetry(), throttle.WithRetry(throttle.RetryPolicy{MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond}),
				throttle.WithBase(roundTripFunc(func(r *http.Request) (*http.Response, error) {
					return bases[r.Header.Get("X-Base")].RoundTrip(r)
				})))
			t.Cleanup(func() { tr.Close() })
			client := &http.Client{Transport: tr}
			call := func(url, base string) error {
				req, _ := http.NewRequestWithContext(context.Background(), tc.method, url, http.NoBody)
				req.Header.Set("X-Base", base)
				resp, err := client.Do(req)
				if err == nil {
					resp.Body.Close()
				}
				return err
			}
			for range 3 {
				if err := call(tc.down, "down"); err == nil || errors.Is(err, throttle.ErrThrottled) {
					t.Fatalf("a call to a host that cannot be reached: %v, want its transport error", err)
				}
			}
			// The give-backs run off the request path: the count drops to 0.
			for deadline := time.Now().Add(10 * time.Second); ; {
				used, err := mem.CalendarUsed(context.Background(), profile.Name, []rule.Rule{day})
				if err != nil {
					t.Fatal(err)
				}
				if used[0] == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d of the day counted for attempts that never reached the provider, want 0", used[0])
				}
				time.Sleep(5 * time.Millisecond) // polls the count
			}
			for i := range 2 {
				if err := call(live.URL, "live"); err != nil {
					t.Fatalf("call %d of the day's 2 once the provider is reachable: %v", i+1, err)
				}
			}
			if err := call(live.URL, "live"); !errors.Is(err, throttle.ErrThrottled) {
				t.Fatalf("a third call of the day: %v, want ErrThrottled", err)
			}
		})
	}
}
