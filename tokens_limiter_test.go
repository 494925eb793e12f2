package throttle_test

import (
	"context"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/limitertest"
	"github.com/quotaware/throttle/limiter/rule"
	"github.com/quotaware/throttle/providers/wechat"
)

// Token exchanges around the limiter: waits for a slot and for another
// replica's fetch, and how such exchanges are counted.

// gatedBase holds every token request until release is closed, telling
// entered when the first arrives: another replica's fetch from a provider
// that is slow to answer.
type gatedBase struct {
	once     sync.Once
	entered  chan struct{}
	release  chan struct{}
	upstream http.RoundTripper
}

// A replica waits for another replica's fetch of the same credential no
// longer than its WithMaxWait, then fails as any wait that does not fit
// does, with ErrThrottled, sending nothing: it waited until its context
// ended, up to a minute behind a slow provider (and for ever without a
// deadline behind a lease without an end).
func TestTokenWaitFitsTheBudget(t *testing.T) {
	for _, maxWait := range []time.Duration{150 * time.Millisecond, 0} {
		t.Run(maxWait.String(), func(t *testing.T) { testTokenWaitFitsTheBudget(t, maxWait) })
	}
}

// WithMaxWait(0) is "never wait": an exchange behind another replica's
// fetch fails at once (the Sharer's own 0 had been taken for no bound).
func testTokenWaitFitsTheBudget(t *testing.T, maxWait time.Duration) {
	gate := &gatedBase{entered: make(chan struct{}), release: make(chan struct{}), upstream: http.DefaultTransport}
	o := newObservability(t)
	f := newTokenFleet(t, 2, append(o.opts, throttle.WithBase(gate), throttle.WithMaxWait(maxWait), throttle.WithoutRetry())...)
	tokenURL := fleetTokenURL(f.emu)

	fetched := getAsync(f.clients[0], tokenURL)
	<-gate.entered // replica 0 holds the lease, its fetch in flight

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, tokenURL, nil)
	start := time.Now()
	_, err := f.clients[1].Do(req)
	took := time.Since(start)
	var te *throttle.ThrottledError
	if !errors.Is(err, throttle.ErrThrottled) || !errors.As(err, &te) || te.Budget != maxWait || te.API != "/cgi-bin/token" {
		t.Fatalf("waiting behind a slow fetch: %#v, want a ThrottledError of /cgi-bin/token with the budget %v", err, maxWait)
	}
	if want := "rate limited by another replica's exchange of the credential, in flight: budget " + maxWait.String(); !strings.Contains(te.Error(), want) {
		t.Errorf("error %q, want it to say %q", te.Error(), want)
	}
	if took < maxWait || ctx.Err() != nil {
		t.Fatalf("failed after %v, want after the budget %v and well before the deadline", took, maxWait)
	}
	// The Transport's error names no secret; http.Client's *url.Error
	// around it quotes the URL, which RedactError blanks.
	if strings.Contains(te.Error(), fleetSecret) || strings.Contains(throttle.RedactError(err).Error(), fleetSecret) {
		t.Fatalf("the error names the secret: %v", te)
	}
	close(gate.release)
	if err := <-fetched; err != nil {
		t.Fatal(err)
	}
	if n := len(f.emu.Requests()); n != 1 {
		t.Fatalf("%d requests reached the provider, want the one fetch", n)
	}
	// The refusal shows as any refused request does, in throttle.requests
	// and in a span, naming the API and neither the secret nor the app.
	if got, want := counts(t, o.metrics(t)["throttle.requests"], "outcome"), map[string]int64{"admitted": 1, "throttled": 1}; !maps.Equal(got, want) {
		t.Errorf("throttle.requests by outcome = %v, want %v", got, want)
	}
	var refused int
	for _, sp := range o.spans.GetSpans() {
		attrs := map[string]string{}
		for _, kv := range sp.Attributes {
			attrs[string(kv.Key)] = kv.Value.Emit()
		}
		if attrs["throttle.outcome"] != "throttled" {
			continue
		}
		refused++
		if attrs["throttle.api"] != "/cgi-bin/token" {
			t.Errorf("span of the refused exchange names the API %q, want /cgi-bin/token", attrs["throttle.api"])
		}
		for _, text := range append(slices.Collect(maps.Values(attrs)), sp.Status.Description) {
			if strings.Contains(text, fleetSecret) || strings.Contains(text, fleetApps[0]) {
				t.Errorf("span of the refused exchange holds a credential: %q", text)
			}
		}
	}
	if refused != 1 {
		t.Errorf("%d spans of a refused exchange, want 1", refused)
	}
}

// An exchange the limiter admitted and that was then answered from Redis
// (another replica's fetch ended while it waited for its slot) reached no
// provider: it counts in throttle.tokens.exchanges alone, as one answered
// before the limiter does. It counted as waited in throttle.requests.
func TestExchangeAnsweredAfterTheLimiterIsNotARequest(t *testing.T) {
	srv := redistest.Shared(t)
	prefix := limitertest.Group(t)
	rdb := srv.Client(t)
	emu := fleetEmulator(t)
	tokenURL := fleetTokenURL(emu)
	o := newObservability(t)
	paced := throttle.MustNew(append(o.opts, throttle.WithLimiter(limiter.MustNewShared(rdb, limiter.SharedConfig{Prefix: prefix})),
		throttle.WithProfiles(testProfile("wechat", mustRule(t, 1, 3*time.Second))), throttle.WithMaxWait(10*time.Second), throttle.WithoutRetry())...)
	defer paced.Close()
	free := throttle.MustNew(throttle.WithLimiter(limiter.MustNewShared(srv.Client(t), limiter.SharedConfig{Prefix: prefix})),
		throttle.WithProfiles(testProfile("wechat")), throttle.WithoutTelemetry())
	defer free.Close()

	// The paced replica's first call takes the rule's slot: its exchange
	// then waits 3 s for the next.
	resp, err := (&http.Client{Transport: paced}).Get(emu.URL + "/cgi-bin/user/info?openid=o")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	ruleState := groupState(rdb, prefix, "wechat")
	before := ruleState()
	exchanged := getAsync((&http.Client{Transport: paced}), tokenURL)
	// Once its slot is booked (the rule's state changed in Redis), it has
	// found nothing kept before the limiter: the other replica fetches now.
	for deadline := time.Now().Add(2 * time.Second); ruleState() == before; {
		if time.Now().After(deadline) {
			t.Fatal("the exchange booked no slot within 2 s")
		}
		time.Sleep(time.Millisecond) // polling Redis for the booking
	}
	resp, err = (&http.Client{Transport: free}).Get(tokenURL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := <-exchanged; err != nil {
		t.Fatal(err)
	}
	if n := emu.Fetches(fleetApps[0], "/cgi-bin/token"); n != 1 {
		t.Fatalf("%d fetches at WeChat, want the other replica's one", n)
	}
	m := o.metrics(t)
	if got := counts(t, m["throttle.requests"], "outcome"); len(got) != 1 || got["admitted"] != 1 {
		t.Errorf("throttle.requests by outcome = %v, want only the API call admitted", got)
	}
	if got := counts(t, m["throttle.tokens.exchanges"], "result"); got["shared"] != 1 {
		t.Errorf("throttle.tokens.exchanges by result = %v, want it shared", got)
	}
}

// A token exchange whose first attempt failed, and whose retry was then
// answered from Redis (another replica fetched meanwhile), is a retried
// call like any other: it shows in throttle.requests, throttle.retries and
// a span. It left no trace.
func TestRetriedExchangeAnsweredFromRedisIsRecorded(t *testing.T) {
	srv := redistest.Shared(t)
	prefix := limitertest.Group(t)
	emu := fleetEmulator(t)
	u, _ := url.Parse(emu.URL)
	set := wechat.MustNew(wechat.Config{Hosts: []string{u.Hostname()}, Apps: []wechat.App{{AppID: fleetApps[0]}}})
	tokenURL := fleetTokenURL(emu)
	other := throttle.MustNew(throttle.WithLimiter(limiter.MustNewShared(srv.Client(t), limiter.SharedConfig{Prefix: prefix})),
		throttle.WithProfiles(set.Profile()), throttle.WithoutTelemetry())
	defer other.Close()

	var calls atomic.Int32
	fetched := make(chan error, 1)
	done := make(chan struct{}) // the other replica's fetch is kept
	base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if calls.Add(1) > 1 {
			return http.DefaultTransport.RoundTrip(req)
		}
		// The first attempt fails before it is written (as net/http
		// reports a refused dial: GetConn without WroteRequest), so that
		// it is retried although WeChat's /cgi-bin/token is no idempotent
		// GET; the other replica, waiting for this one's lease, fetches
		// once it is let go.
		if trace := httptrace.ContextClientTrace(req.Context()); trace != nil && trace.GetConn != nil {
			trace.GetConn(req.URL.Host)
		}
		go func() {
			resp, err := (&http.Client{Transport: other}).Get(tokenURL)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			fetched <- err
			close(done)
		}()
		return nil, errors.New("connection refused")
	})
	// The retry books its slot, then reads the kept answer, only once the
	// other replica has kept it: its Redis client holds the booking until
	// then (within the limiter's Timeout, made long for it).
	rdb := srv.Client(t)
	rdb.AddHook(holdScripts{until: done, after: func() bool { return calls.Load() > 0 }})
	o := newObservability(t)
	tr := throttle.MustNew(append(o.opts, throttle.WithLimiter(limiter.MustNewShared(rdb, limiter.SharedConfig{Prefix: prefix, Timeout: time.Minute})),
		throttle.WithProfiles(set.Profile()), throttle.WithBase(base),
		throttle.WithRetry(throttle.RetryPolicy{MaxAttempts: 2, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond}))...)
	defer tr.Close()
	resp, err := (&http.Client{Transport: tr}).Get(tokenURL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := <-fetched; err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("the retry reached the provider (%d sends), want it answered from Redis", n)
	}
	m := o.metrics(t)
	if got := counts(t, m["throttle.requests"], "outcome"); got["admitted"]+got["waited"] != 1 {
		t.Errorf("throttle.requests by outcome = %v, want the call once", got)
	}
	if got := counts(t, m["throttle.retries"], "provider"); got["wechat"] != 1 {
		t.Errorf("throttle.retries = %v, want 1", got)
	}
	if n := len(o.spans.GetSpans()); n != 1 {
		t.Errorf("%d spans, want the retried call's", n)
	}
}

// An exchange that waited for its limiter slot, then behind another
// replica's fetch, waits no longer in all than WithMaxWait from its start:
// the wait behind the fetch had a fresh WithMaxWait of its own (2 s for
// the slot, then 2.5 s more: 4.5 s with WithMaxWait(2.5s)).
func TestExchangeWaitsNoLongerThanItsBudgetInAll(t *testing.T) {
	const slotWait, maxWait = 2 * time.Second, 2500 * time.Millisecond
	srv := redistest.Shared(t)
	prefix := limitertest.Group(t)
	rdb := srv.Client(t)
	emu := fleetEmulator(t)
	tokenURL := fleetTokenURL(emu)
	paced := throttle.MustNew(throttle.WithLimiter(limiter.MustNewShared(rdb, limiter.SharedConfig{Prefix: prefix})),
		throttle.WithProfiles(testProfile("wechat", mustRule(t, 1, slotWait))), throttle.WithMaxWait(maxWait),
		throttle.WithoutRetry(), throttle.WithoutTelemetry())
	defer paced.Close()
	gate := &gatedBase{entered: make(chan struct{}), release: make(chan struct{}), upstream: http.DefaultTransport}
	slow := throttle.MustNew(throttle.WithLimiter(limiter.MustNewShared(srv.Client(t), limiter.SharedConfig{Prefix: prefix})),
		throttle.WithProfiles(testProfile("wechat")), throttle.WithBase(gate), throttle.WithoutTelemetry())
	defer slow.Close()

	resp, err := (&http.Client{Transport: paced}).Get(emu.URL + "/cgi-bin/user/info?openid=o") // takes the slot
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	ruleState := groupState(rdb, prefix, "wechat")
	before := ruleState()
	type result struct {
		err  error
		took time.Duration
	}
	done := make(chan result, 1)
	go func() {
		start := time.Now()
		resp, err := (&http.Client{Transport: paced}).Get(tokenURL)
		if err == nil {
			resp.Body.Close()
		}
		done <- result{err, time.Since(start)}
	}()
	for deadline := time.Now().Add(slotWait / 2); ruleState() == before; {
		if time.Now().After(deadline) {
			t.Fatal("the exchange booked no slot in time")
		}
		time.Sleep(time.Millisecond) // polling Redis for the booking
	}
	// While it waits for its slot, the other replica takes the lease and
	// its fetch hangs.
	fetched := getAsync((&http.Client{Transport: slow}), tokenURL)
	<-gate.entered
	r := <-done
	close(gate.release)
	if err := <-fetched; err != nil {
		t.Fatal(err)
	}
	if !errors.Is(r.err, throttle.ErrThrottled) {
		t.Fatalf("exchange behind a hung fetch: %v, want ErrThrottled", r.err)
	}
	// WithMaxWait from its start, not the slot's wait and then WithMaxWait
	// again (1 s either side of the midpoint).
	if r.took >= slotWait+maxWait-time.Second {
		t.Fatalf("the exchange took %v, want about its budget %v, well under %v", r.took, maxWait, slotWait+maxWait)
	}
}

// groupState returns what reads the string keys of a limiter group in
// Redis, to tell when a request booked a slot.
func groupState(rdb *redis.Client, prefix, group string) func() string {
	return func() string {
		keys, _ := rdb.Keys(context.Background(), "{"+prefix+":"+group+"}:*").Result()
		slices.Sort(keys)
		var b strings.Builder
		for _, k := range keys {
			v, _ := rdb.Get(context.Background(), k).Result()
			b.WriteString(k + "=" + v + ";")
		}
		return b.String()
	}
}

// holdScripts holds a client's EVALSHA calls (the limiter's reservations;
// the token leases go through EVAL) until until is closed, once after
// says so.
type holdScripts struct {
	until <-chan struct{}
	after func() bool
}

func (holdScripts) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h holdScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "evalsha" && h.after() {
			select {
			case <-h.until:
			case <-ctx.Done():
			}
		}
		return next(ctx, cmd)
	}
}

func (holdScripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// getAsync GETs url through c on a goroutine of its own, reads and closes
// the body, and delivers the error.
func getAsync(c *http.Client, url string) <-chan error {
	out := make(chan error, 1)
	go func() {
		resp, err := c.Get(url)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		out <- err
	}()
	return out
}

// connTraced is a base that reports getting a connection to the request's
// trace, then holds each token request until release is closed (the
// connection being made), then reports the write and sends it upstream
// whatever became of the caller.
type connTraced struct {
	entered, release chan struct{}
	once             sync.Once
	upstream         http.RoundTripper
}

func (b *connTraced) RoundTrip(req *http.Request) (*http.Response, error) {
	trace := httptrace.ContextClientTrace(req.Context())
	if trace != nil && trace.GetConn != nil {
		trace.GetConn(req.URL.Host)
	}
	if strings.HasSuffix(req.URL.Path, "/cgi-bin/token") {
		b.once.Do(func() { close(b.entered) })
		<-b.release
	}
	if trace != nil && trace.WroteRequest != nil {
		trace.WroteRequest(httptrace.WroteRequestInfo{})
	}
	return b.upstream.RoundTrip(req.WithContext(context.WithoutCancel(req.Context())))
}

// A caller that gives up on a rotating exchange while its connection is
// being made gets its context's error at once, but the exchange still goes
// out for the fleet: its slot stays booked. The trace of the caller's
// attempt (a connection asked for, nothing written) used to give the slot
// back, and the limiter counted one call fewer than WeChat.
func TestExchangeItsCallerGaveUpOnKeepsItsSlot(t *testing.T) {
	srv := redistest.Shared(t)
	prefix := limitertest.Group(t)
	emu := fleetEmulator(t)
	base := &connTraced{entered: make(chan struct{}), release: make(chan struct{}), upstream: http.DefaultTransport}
	// A day's rule, as WeChat's 2,000 exchanges a day: a slot worth the
	// trace that tells an attempt never written.
	daily := rule.Must(rule.NewCalendar("day", 1, rule.Day, time.UTC))
	tr := throttle.MustNew(throttle.WithLimiter(limiter.MustNewShared(srv.Client(t), limiter.SharedConfig{Prefix: prefix})),
		throttle.WithBase(base), throttle.WithProfiles(testProfile("wechat", daily)),
		throttle.WithoutRetry(), throttle.WithoutTelemetry())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := get(ctx, &http.Client{Transport: tr}, fleetTokenURL(emu))
		done <- err
	}()
	<-base.entered
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the caller that gave up: %v, want context.Canceled", err)
	}
	close(base.release)
	for deadline := time.Now().Add(10 * time.Second); emu.Fetches(fleetApps[0], "/cgi-bin/token") == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the exchange never reached WeChat")
		}
		time.Sleep(time.Millisecond) // polling the emulator for the detached fetch
	}
	tr.Close() // its background give-backs done
	other := throttle.MustNew(throttle.WithLimiter(limiter.MustNewShared(srv.Client(t), limiter.SharedConfig{Prefix: prefix})),
		throttle.WithProfiles(testProfile("wechat", daily)), throttle.WithoutRetry(), throttle.WithoutTelemetry(),
		throttle.WithMaxWait(time.Second))
	defer other.Close()
	if _, err := get(context.Background(), &http.Client{Transport: other}, emu.URL+"/cgi-bin/user/info?openid=o"); !errors.Is(err, throttle.ErrThrottled) {
		t.Errorf("the day's one call after an exchange WeChat got: %v, want ErrThrottled (its slot given back)", err)
	}
}
