package throttle_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/apps"
	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/limitertest"
	"github.com/quotaware/throttle/limiter/rule"
	"github.com/quotaware/throttle/providers"
	"github.com/quotaware/throttle/providers/wechat"
	noopmetric "go.opentelemetry.io/otel/metric/noop"
	nooptrace "go.opentelemetry.io/otel/trace/noop"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// recorder is a provider stand-in that records arrival times.
type recorder struct {
	mu       sync.Mutex
	arrivals []time.Time
	paths    []string
	answer   func(w http.ResponseWriter, r *http.Request)
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec.mu.Lock()
	rec.arrivals = append(rec.arrivals, time.Now())
	rec.paths = append(rec.paths, r.URL.Path)
	answer := rec.answer
	rec.mu.Unlock()
	if answer != nil {
		answer(w, r)
		return
	}
	io.WriteString(w, `{"errcode":0,"errmsg":"ok"}`)
}

func (rec *recorder) seen() []time.Time {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]time.Time(nil), rec.arrivals...)
}

func serve(t *testing.T, rec *recorder) *httptest.Server {
	srv := httptest.NewServer(rec)
	t.Cleanup(srv.Close)
	return srv
}

// testProfile limits every request by rules, with one penalty scope per path,
// and reads `{"errcode":429}` as a quota error.
func testProfile(name string, rules ...rule.Rule) providers.Profile {
	return providers.Profile{
		Name:  name,
		Match: func(*http.Request) bool { return true },
		Route: func(r *http.Request) (providers.Route, error) {
			api := providers.FoldPath(r.URL.Path)
			return providers.Route{API: api, Rules: rules, Scopes: []string{"api:" + api}}, nil
		},
		Classify: func(_ *http.Request, resp *http.Response, _ *providers.Route) providers.Verdict {
			if resp.Header.Get("X-Test-Quota") != "" {
				return providers.Verdict{Kind: providers.Quota, Until: time.Now().Add(time.Hour), Code: "429", NotProcessed: true}
			}
			if ms := resp.Header.Get("X-Test-Penalty-Ms"); ms != "" {
				n, _ := strconv.Atoi(ms)
				return providers.Verdict{Kind: providers.Quota, Until: time.Now().Add(time.Duration(n) * time.Millisecond), Code: "90018",
					NotProcessed: resp.Header.Get("X-Test-Processed") == ""}
			}
			switch {
			case resp.Header.Get("X-Test-Busy") != "":
				return providers.Verdict{Kind: providers.Transient, Code: "-1", NotProcessed: true}
			case resp.StatusCode >= 500:
				return providers.Verdict{Kind: providers.Transient, Code: strconv.Itoa(resp.StatusCode), NotProcessed: resp.StatusCode == 503}
			}
			return providers.Verdict{}
		},
	}
}

func mustRule(t testing.TB, limit int, period time.Duration) rule.Rule {
	t.Helper()
	r, err := rule.New("r", limit, period)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func get(ctx context.Context, c *http.Client, u string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return resp, err
}

func TestNoOptionsPassesThrough(t *testing.T) {
	rec := &recorder{answer: func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Echo", r.Header.Get("X-Custom"))
		w.Write(b)
	}}
	srv := serve(t, rec)
	c := &http.Client{Transport: throttle.MustNew()}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/x?access_token=abc", strings.NewReader("payload"))
	req.Header.Set("X-Custom", "v")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if string(body) != "payload" || resp.Header.Get("X-Echo") != "v" {
		t.Fatalf("body %q, echo %q: the request was altered", body, resp.Header.Get("X-Echo"))
	}
}

func TestBuildRejectsBadOptions(t *testing.T) {
	good := testProfile("p", mustRule(t, 1, time.Second))
	cases := []struct {
		name string
		opts []throttle.Option
		want string
	}{
		{"negative max wait", []throttle.Option{throttle.WithMaxWait(-time.Second)}, "WithMaxWait"},
		{"nil base", []throttle.Option{throttle.WithBase(nil)}, "WithBase"},
		{"nil limiter", []throttle.Option{throttle.WithLimiter(nil)}, "WithLimiter"},
		{"nil redis", []throttle.Option{throttle.WithRedis(nil)}, "WithRedis"},
		{"unnamed profile", []throttle.Option{throttle.WithProfiles(providers.Profile{Match: good.Match, Route: good.Route})}, "Name"},
		{"profile without route", []throttle.Option{throttle.WithProfiles(providers.Profile{Name: "x", Match: good.Match})}, "Route"},
		{"duplicate profiles", []throttle.Option{throttle.WithProfiles(good, good)}, "two profiles"},
		{"negative attempts", []throttle.Option{throttle.WithRetry(throttle.RetryPolicy{MaxAttempts: -1})}, "MaxAttempts"},
		{"negative backoff", []throttle.Option{throttle.WithRetry(throttle.RetryPolicy{MinBackoff: -time.Second})}, "MinBackoff"},
		{"backoff upside down", []throttle.Option{throttle.WithRetry(throttle.RetryPolicy{MaxAttempts: 2, MinBackoff: time.Second, MaxBackoff: time.Millisecond})}, "MaxBackoff"},
		// Both: the order of the options used to decide in silence.
		{"retry and no retry", []throttle.Option{throttle.WithRetry(throttle.RetryPolicy{}), throttle.WithoutRetry()}, "WithRetry and WithoutRetry"},
		{"no retry and retry", []throttle.Option{throttle.WithoutRetry(), throttle.WithRetry(throttle.RetryPolicy{})}, "WithRetry and WithoutRetry"},
		{"no telemetry and a meter", []throttle.Option{throttle.WithoutTelemetry(), throttle.WithMeterProvider(noopmetric.NewMeterProvider())}, "WithoutTelemetry and"},
		{"a tracer and no telemetry", []throttle.Option{throttle.WithTracerProvider(nooptrace.NewTracerProvider()), throttle.WithoutTelemetry()}, "WithoutTelemetry and"},
		{"two limiters", []throttle.Option{throttle.WithLimiter(limiter.NewMemory()), throttle.WithLimiter(limiter.NewMemory())}, "given twice"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := throttle.New(tc.opts...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New err = %v, want one naming %s", err, tc.want)
			}
		})
	}
	defer func() {
		if recover() == nil {
			t.Error("New with a bad option did not panic")
		}
	}()
	throttle.MustNew(throttle.WithMaxWait(-1))
}

// A backoff bound given alone sets the other's default: MaxBackoff 100ms
// failed as below a MinBackoff of 200ms that was never given.
func TestRetryBoundGivenAlone(t *testing.T) {
	for _, p := range []throttle.RetryPolicy{{MaxBackoff: 100 * time.Millisecond}, {MinBackoff: 5 * time.Second}} {
		if _, err := throttle.New(throttle.WithRetry(p)); err != nil {
			t.Errorf("WithRetry(%+v): %v", p, err)
		}
	}
}

// Three Transports on one Redis (three replicas) never exceed the rule at the
// server. The rule, 20 per 1.5 s, gives at most 14 slots in any second, which
// leaves 6 arrivals of room for a loaded machine's late wakes and loopback
// latency between the slot and the arrival (20 per 1.1 s left 100 ms, and
// failed with 22 arrivals beside other packages); replicas that did not
// share the rule would send 3 × 14.
func TestTransportsShareRedis(t *testing.T) {
	rdb := redistest.Shared(t)
	rec := &recorder{}
	srv := serve(t, rec)
	rl := mustRule(t, 20, 1500*time.Millisecond)
	profile := testProfile(limitertest.Group(t), rl)
	var clients []*http.Client
	for i := 0; i < 3; i++ {
		clients = append(clients, &http.Client{Transport: throttle.MustNew(
			throttle.WithRedis(rdb.Client(t)), throttle.WithProfiles(profile), throttle.WithoutTelemetry())})
	}
	stop := time.Now().Add(2500 * time.Millisecond)
	var wg sync.WaitGroup
	for _, c := range clients {
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(stop) {
					if _, err := get(context.Background(), c, srv.URL+"/api"); err != nil && !errors.Is(err, throttle.ErrThrottled) {
						t.Error(err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	arrivals := rec.seen()
	most, at := limitertest.MaxInWindow(arrivals, time.Second)
	t.Logf("%d arrivals of calls started within 2.5s, at most %d in a second", len(arrivals), most)
	if most > 20 {
		t.Fatalf("%d arrivals in the second from %v, want at most 20", most, at.Format(time.StampMicro))
	}
	if len(arrivals) < 28 {
		t.Fatalf("only %d arrivals in 2.5s at 20 per 1.5s (a slot every 75 ms): the limiter starves callers", len(arrivals))
	}
}

// A deadline shorter than the needed wait fails at once with ErrThrottled,
// through the *url.Error of http.Client, and the server sees nothing.
func TestDeadlineTooShortFailsAtOnce(t *testing.T) {
	rec := &recorder{}
	srv := serve(t, rec)
	c := &http.Client{Transport: throttle.MustNew(throttle.WithProfiles(testProfile("p", mustRule(t, 1, 10*time.Second))))}
	if _, err := get(context.Background(), c, srv.URL+"/a"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	began := time.Now()
	_, err := get(ctx, c, srv.URL+"/a")
	if elapsed := time.Since(began); elapsed >= 2*time.Second {
		t.Errorf("took %v: it waited for the deadline instead of failing at once", elapsed)
	}
	var uerr *url.Error
	var terr *throttle.ThrottledError
	if !errors.As(err, &uerr) || !errors.Is(err, throttle.ErrThrottled) || !errors.As(err, &terr) {
		t.Fatalf("err = %#v, want a *url.Error wrapping *ThrottledError", err)
	}
	if terr.RetryAfter <= 2*time.Second || terr.RetryAfter > 10*time.Second || terr.Budget > 2*time.Second {
		t.Errorf("RetryAfter %v, Budget %v: want the ~10s slot and the 2s budget", terr.RetryAfter, terr.Budget)
	}
	if !strings.Contains(terr.Rule, "1 per 10s") {
		t.Errorf("Rule = %q, want the binding rule", terr.Rule)
	}
	if n := len(rec.seen()); n != 1 {
		t.Fatalf("server saw %d requests, want 1", n)
	}
}

// observed wraps a Limiter and reports each reservation, and each slot
// given back (when cancelled is not nil).
type observed struct {
	limiter.Limiter
	reserved  chan limiter.Reservation
	cancelled chan limiter.Reservation
}

func (o *observed) Reserve(ctx context.Context, req limiter.Request) (limiter.Reservation, error) {
	res, err := o.Limiter.Reserve(ctx, req)
	o.reserved <- res
	if err != nil || !res.OK() || o.cancelled == nil {
		return res, err
	}
	return limiter.Admit(time.Now(), res.Delay(), res.Rule(), func(ctx context.Context) error {
		err := res.Cancel(ctx)
		o.cancelled <- res
		return err
	}, res.Release), nil
}

// Cancelling during a wait sends nothing and gives the slot back.
func TestCancelDuringWaitGivesSlotBack(t *testing.T) {
	rec := &recorder{}
	srv := serve(t, rec)
	lim := &observed{Limiter: limiter.NewMemory(), reserved: make(chan limiter.Reservation, 10), cancelled: make(chan limiter.Reservation, 10)}
	c := &http.Client{Transport: throttle.MustNew(throttle.WithLimiter(lim),
		throttle.WithProfiles(testProfile("p", mustRule(t, 1, 2*time.Second))), throttle.WithMaxWait(10*time.Second))}
	if _, err := get(context.Background(), c, srv.URL+"/a"); err != nil {
		t.Fatal(err)
	}
	<-lim.reserved
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, err := get(ctx, c, srv.URL+"/a")
		done <- err
	}()
	waiting := <-lim.reserved
	if !waiting.OK() || waiting.Delay() <= 0 {
		t.Fatalf("second request: %+v, want a booked slot ahead", waiting)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	// The slot is given back off the request path.
	if back := <-lim.cancelled; !back.SendAt().Equal(waiting.SendAt()) {
		t.Fatalf("gave back the slot at %v, want %v", back.SendAt(), waiting.SendAt())
	}
	go get(context.Background(), c, srv.URL+"/a")
	next := <-lim.reserved
	if !next.OK() || !next.SendAt().Equal(waiting.SendAt()) {
		t.Fatalf("next request scheduled at %v, want the cancelled slot %v", next.SendAt(), waiting.SendAt())
	}
	if n := len(rec.seen()); n != 1 {
		t.Fatalf("server saw %d requests, want only the first: the cancelled one was sent", n)
	}
}

// cancelAfterReserve is observed that ends the caller's context right
// after the limiter answers, as a caller giving up during the call would.
type cancelAfterReserve struct {
	*observed
	cancel context.CancelFunc
}

func (c cancelAfterReserve) Reserve(ctx context.Context, req limiter.Request) (limiter.Reservation, error) {
	res, err := c.observed.Reserve(ctx, req)
	c.cancel()
	return res, err
}

// A caller that gives up while the limiter answers with a slot due now
// sends nothing and gives the slot back (it was spent: only a slot ahead
// went through Wait, which gives back).
func TestCancelDuringReserveGivesSlotBack(t *testing.T) {
	rec := &recorder{}
	srv := serve(t, rec)
	ctx, cancel := context.WithCancel(context.Background())
	lim := cancelAfterReserve{observed: &observed{Limiter: limiter.NewMemory(), reserved: make(chan limiter.Reservation, 10),
		cancelled: make(chan limiter.Reservation, 10)}, cancel: cancel}
	c := &http.Client{Transport: throttle.MustNew(throttle.WithLimiter(lim), throttle.WithoutRetry(),
		throttle.WithProfiles(testProfile("p", mustRule(t, 1, time.Hour))))}
	if _, err := get(ctx, c, srv.URL+"/a"); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	got := <-lim.reserved
	if !got.OK() || got.Delay() != 0 {
		t.Fatalf("reserved %+v, want a slot due now", got)
	}
	// Given back off the request path, at once: 10 s is a bound for a
	// loaded machine, not a wait.
	select {
	case back := <-lim.cancelled:
		if !back.SendAt().Equal(got.SendAt()) {
			t.Fatalf("gave back the slot at %v, want %v", back.SendAt(), got.SendAt())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the slot was not given back")
	}
	if n := len(rec.seen()); n != 0 {
		t.Fatalf("server saw %d requests, want none", n)
	}
}

// A quota answer reaches the caller unchanged, and the scope is penalised for
// every Transport sharing the limiter: none of them calls it again.
func TestQuotaAnswerPenalizesScopeEverywhere(t *testing.T) {
	const body = `{"errcode":90018,"errmsg":"too many"}`
	rec := &recorder{answer: func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hot" {
			w.Header().Set("X-Test-Quota", "1")
		}
		io.WriteString(w, body)
	}}
	srv := serve(t, rec)
	rdb := redistest.Shared(t)
	profile := testProfile(limitertest.Group(t), mustRule(t, 100, time.Second))
	a := &http.Client{Transport: throttle.MustNew(throttle.WithRedis(rdb.Client(t)), throttle.WithProfiles(profile), throttle.WithoutRetry())}
	b := &http.Client{Transport: throttle.MustNew(throttle.WithRedis(rdb.Client(t)), throttle.WithProfiles(profile), throttle.WithoutRetry())}
	resp, err := a.Get(srv.URL + "/hot")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(got) != body {
		t.Fatalf("caller read %q, want the provider's body %q", got, body)
	}
	// The penalty is written to Redis off the request path: wait for it.
	other, err := newSharedOnly(t, rdb.Client(t), "")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, func() bool {
		res, err := other.Reserve(context.Background(), limiter.Request{Group: profile.Name, Scopes: []string{"api:/hot"}})
		return err == nil && res.Penalty() != nil
	})
	for i, c := range []*http.Client{a, b, a} {
		_, err := get(context.Background(), c, srv.URL+"/hot")
		var pe *throttle.PenaltyError
		if !errors.Is(err, throttle.ErrPenalized) || !errors.As(err, &pe) {
			t.Fatalf("client %d: err = %v, want ErrPenalized", i, err)
		}
		if pe.Scope != "api:/hot" || pe.Code != "429" || time.Until(pe.Until) < 59*time.Minute {
			t.Errorf("client %d: penalty %+v, want scope api:/hot, code 429, about an hour", i, pe)
		}
	}
	if _, err := get(context.Background(), b, srv.URL+"/cold"); err != nil {
		t.Fatalf("another scope: %v", err)
	}
	if n := len(rec.seen()); n != 2 {
		t.Fatalf("server saw %d requests, want 2 (the quota error and /cold)", n)
	}
}

// newSharedOnly is a Shared limiter that refuses while Redis is away (so it
// stays out of the replica registry), closed at the end of the test.
func newSharedOnly(t *testing.T, client redis.UniversalClient, prefix string) (*limiter.Shared, error) {
	t.Helper()
	l, err := limiter.NewShared(client, limiter.SharedConfig{Prefix: prefix, Mode: limiter.OutageRefuse, Timeout: 5 * time.Second})
	if err == nil {
		t.Cleanup(func() { l.Close() })
	}
	return l, err
}

// RoundTrip leaves the caller's request as it was, also when the route
// peeks at its body (Feishu's messages, WeCom's message/send): the peek
// used to put its replaying body in the caller's request.
func TestRoundTripLeavesCallersRequest(t *testing.T) {
	rec := &recorder{answer: func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Write(b)
	}}
	srv := serve(t, rec)
	p := testProfile("peek", mustRule(t, 100, time.Second))
	route := p.Route
	p.Route = func(r *http.Request) (providers.Route, error) {
		providers.PeekRequestBody(r, 64)
		return route(r)
	}
	c := &http.Client{Transport: throttle.MustNew(throttle.WithLimiter(limiter.NewMemory()), throttle.WithProfiles(p), throttle.WithoutTelemetry())}
	body := io.NopCloser(strings.NewReader(`{"receive_id":"oc_1","content":"hi"}`))
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/im/v1/messages", body)
	resp, err := c.Transport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(got) != `{"receive_id":"oc_1","content":"hi"}` {
		t.Fatalf("the provider got %q", got)
	}
	if req.Body != body {
		t.Fatalf("the caller's request body is now a %T, want its own", req.Body)
	}

	// A token exchange whose app is read from its body, apps on.
	wc := &http.Client{Transport: throttle.MustNew(throttle.WithLimiter(limiter.NewMemory()),
		throttle.WithProfiles(wechat.MustNew(wechat.Config{Hosts: []string{strings.TrimPrefix(srv.URL, "http://")}, Apps: []wechat.App{{AppID: "wx1"}}}).Profile()),
		throttle.WithApps(apps.Config{}), throttle.WithoutTelemetry())}
	body = io.NopCloser(strings.NewReader(`{"grant_type":"client_credential","appid":"wx1","secret":"s"}`))
	req, _ = http.NewRequest(http.MethodPost, srv.URL+"/cgi-bin/stable_token", body)
	if resp, err = wc.Transport.RoundTrip(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if req.Body != body {
		t.Fatalf("after an exchange, the caller's request body is now a %T, want its own", req.Body)
	}
}

// A penalty's end is in UTC from the Transport on, whatever zone the
// provider wrote it in: logs, errors and throttlectl used to mix Beijing's
// +08:00 and UTC for one penalty.
func TestPenaltyEndsAreUTC(t *testing.T) {
	beijing := time.FixedZone("CST", 8*3600)
	p := testProfile("p")
	p.Classify = func(*http.Request, *http.Response, *providers.Route) providers.Verdict {
		return providers.Verdict{Kind: providers.Quota, Code: "90018", NotProcessed: true, Until: time.Now().Add(time.Hour).In(beijing)}
	}
	srv := serve(t, &recorder{})
	c := &http.Client{Transport: throttle.MustNew(throttle.WithProfiles(p), throttle.WithoutRetry(), throttle.WithLogger(quiet))}
	if _, err := get(context.Background(), c, srv.URL+"/a"); err != nil {
		t.Fatal(err)
	}
	_, err := get(context.Background(), c, srv.URL+"/a")
	var pe *throttle.PenaltyError
	if !errors.As(err, &pe) || pe.Until.Location() != time.UTC || !strings.Contains(pe.Error(), "Z") {
		t.Fatalf("penalised: %v, want a PenaltyError whose end is in UTC", err)
	}
	// An end clamped to MaxPenalty too.
	p.MaxPenalty = time.Minute
	c = &http.Client{Transport: throttle.MustNew(throttle.WithProfiles(p), throttle.WithoutRetry(), throttle.WithLogger(quiet))}
	if _, err := get(context.Background(), c, srv.URL+"/a"); err != nil {
		t.Fatal(err)
	}
	_, err = get(context.Background(), c, srv.URL+"/a")
	if !errors.As(err, &pe) || pe.Until.Location() != time.UTC || pe.Until.After(time.Now().Add(time.Minute)) {
		t.Fatalf("penalised, end clamped: %v, want a PenaltyError whose end is in UTC, within MaxPenalty", err)
	}
}
