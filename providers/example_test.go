package providers_test

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/limiter/rule"
	"github.com/quotaware/throttle/providers"
)

// A profile for a provider with no preset: a JSON API that allows 5 calls
// per wall-clock second and answers 429 with a Retry-After header beyond
// that. Match takes the API's host; Route gives every request one rule (here
// 2 per second, well inside the provider's window whatever the latency) and
// one penalty scope; Classify turns a 429 into a penalty of that scope that
// lasts as long as Retry-After says.
func ExampleProfile() {
	api := newJSONAPI(5)
	defer api.Close()

	rl := rule.Must(rule.New("acme:app1", 2, time.Second))
	profile := providers.Profile{
		Name:  "acme",
		Match: providers.MatchHosts(api.Listener.Addr().String()),
		Route: func(req *http.Request) (providers.Route, error) {
			return providers.Route{
				API:    providers.FoldPath(req.URL.Path), // "/v1/orders/{id}"
				Rules:  []rule.Rule{rl},
				Scopes: []string{"app:app1"},
			}, nil
		},
		Classify: func(req *http.Request, resp *http.Response, route *providers.Route) providers.Verdict {
			if resp.StatusCode != http.StatusTooManyRequests {
				return providers.Verdict{Kind: providers.OK}
			}
			wait, ok := providers.ParseRetryAfter(resp.Header, time.Now())
			if !ok {
				wait = time.Minute
			}
			return providers.Verdict{
				Kind:         providers.Quota,
				Scope:        route.Scope("app"),
				Until:        time.Now().Add(wait),
				Code:         "429",
				NotProcessed: true,
			}
		},
	}
	client := &http.Client{Transport: throttle.MustNew(
		throttle.WithProfiles(profile),
		throttle.WithLogger(slog.New(slog.DiscardHandler)), // penalties are logged at Info
	)}
	get := func() (int, error) {
		resp, err := client.Get(api.URL + "/v1/orders/1001")
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}

	// Eight calls at once: paced at 2 per second, all answered.
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := 0
	for range 8 {
		wg.Go(func() {
			if status, err := get(); err == nil && status == http.StatusOK {
				mu.Lock()
				ok++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	fmt.Printf("%d of 8 answered 200; the API answered 429 %d times\n", ok, api.refused())

	// The API says 429 anyway (another client of the same account, say):
	// the caller gets the 429 as sent, and the next call waits for no slot
	// but fails at once until Retry-After has passed.
	api.force429()
	status, _ := get()
	_, err := get()
	var pe *throttle.PenaltyError
	fmt.Println(status, errors.Is(err, throttle.ErrPenalized), errors.As(err, &pe) && pe.Scope == "app:app1")
	// Output:
	// 8 of 8 answered 200; the API answered 429 0 times
	// 429 true true
}

// jsonAPI is a provider that allows perSecond calls per wall-clock second.
type jsonAPI struct {
	*httptest.Server
	mu        sync.Mutex
	perSecond int
	second    int64
	calls     int
	n429      int
	forced    bool
}

func newJSONAPI(perSecond int) *jsonAPI {
	a := &jsonAPI{perSecond: perSecond}
	a.Server = httptest.NewServer(http.HandlerFunc(a.serve))
	return a
}

func (a *jsonAPI) serve(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if s := time.Now().Unix(); s != a.second {
		a.second, a.calls = s, 0
	}
	a.calls++
	w.Header().Set("Content-Type", "application/json")
	if a.forced || a.calls > a.perSecond {
		a.forced = false
		a.n429++
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = io.WriteString(w, `{"error":"rate_limited"}`)
		return
	}
	_, _ = io.WriteString(w, `{"id":"1001","status":"paid"}`)
}

func (a *jsonAPI) refused() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n429
}

func (a *jsonAPI) force429() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.forced = true
}
