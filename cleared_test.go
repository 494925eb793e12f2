package throttle_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/inspect"
	"github.com/quotaware/throttle/limiter/limitertest"
	"github.com/quotaware/throttle/providers"
	"github.com/redis/go-redis/v9"
)

// heldBase answers /reset at once and holds /slow's answer, a 45009, until
// release is closed; sent is closed once /slow has gone.
type heldBase struct {
	sent, release chan struct{}
}

func (b *heldBase) RoundTrip(req *http.Request) (*http.Response, error) {
	code := "0"
	if req.URL.Path == "/slow" {
		close(b.sent)
		<-b.release
		code = "45009"
	}
	return &http.Response{StatusCode: 200, Header: http.Header{"X-Code": {code}}, Body: io.NopCloser(strings.NewReader(`{}`)), Request: req}, nil
}

// resetProfile penalises /slow's scope on a 45009 until an hour from now,
// and reads an ok answer to /reset as a reset that ended it.
func resetProfile() providers.Profile {
	return providers.Profile{
		Name:  "p",
		Match: func(*http.Request) bool { return true },
		Route: func(r *http.Request) (providers.Route, error) {
			return providers.Route{API: r.URL.Path, Scopes: []string{"api:" + r.URL.Path}}, nil
		},
		Classify: func(req *http.Request, resp *http.Response, _ *providers.Route) providers.Verdict {
			if resp.Header.Get("X-Code") == "45009" {
				return providers.Verdict{Kind: providers.Quota, Until: time.Now().Add(time.Hour), Code: "45009", NotProcessed: true}
			}
			if req.URL.Path == "/reset" {
				return providers.Verdict{Cleared: &providers.Cleared{Scopes: []string{"api:/slow"}, Code: "45009"}}
			}
			return providers.Verdict{}
		},
	}
}

// provider returns a call of path on the provider through client, its
// answer's body closed.
func provider(client *http.Client) func(path string) error {
	return func(path string) error {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://provider.test"+path, nil)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
}

// A 45009 to a request sent before a reset, arriving after the reset's
// answer, is what the reset ended: it penalises nothing. Before, it shut the
// API again until midnight.
func TestAnswerFromBeforeAResetPenalisesNothing(t *testing.T) {
	base := &heldBase{sent: make(chan struct{}), release: make(chan struct{})}
	client := &http.Client{Transport: throttle.MustNew(throttle.WithProfiles(resetProfile()), throttle.WithBase(base),
		throttle.WithoutTelemetry(), throttle.WithoutRetry())}
	get := provider(client)
	slow := make(chan error, 1)
	go func() { slow <- get("/slow") }()
	<-base.sent
	if err := get("/reset"); err != nil {
		t.Fatal(err)
	}
	close(base.release)
	if err := <-slow; err != nil {
		t.Fatal(err) // the 45009 reaches its caller as it came
	}
	base.sent, base.release = make(chan struct{}), make(chan struct{})
	close(base.release)
	if err := get("/slow"); errors.Is(err, throttle.ErrPenalized) {
		t.Fatalf("the scope was penalised by an answer from before the reset: %v", err)
	}
	// That call was sent after the reset: its 45009 penalises.
	if err := get("/slow"); !errors.Is(err, throttle.ErrPenalized) {
		t.Fatalf("after a 45009 to a call sent after the reset: %v, want the scope penalised", err)
	}
}

// A reset lifts penalties of its code only: where this replica's breaker
// holds a 45009 but Redis now holds a penalty of another code on the scope
// (a 45011 recorded since), that penalty stands. Before, the reset deleted
// whatever the key held.
func TestResetLeavesAPenaltyOfAnotherCode(t *testing.T) {
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	prefix := limitertest.Group(t)
	lim := limiter.MustNewShared(rdb, limiter.SharedConfig{Prefix: prefix})
	t.Cleanup(func() { lim.Close() })
	base := &heldBase{sent: make(chan struct{}), release: make(chan struct{})}
	close(base.release)
	client := &http.Client{Transport: throttle.MustNew(throttle.WithProfiles(resetProfile()), throttle.WithBase(base),
		throttle.WithLimiter(lim), throttle.WithoutTelemetry(), throttle.WithoutRetry(), throttle.WithLogger(quiet))}
	get := provider(client)
	ctx := context.Background()
	key := "{" + prefix + ":p}:p:api:/slow"
	if err := get("/slow"); err != nil {
		t.Fatal(err)
	}
	// The 45009 is written to Redis; then another code replaces it there.
	for deadline := time.Now().Add(10 * time.Second); !strings.HasSuffix(rdb.Get(ctx, key).Val(), "|45009"); {
		if time.Now().After(deadline) {
			t.Fatalf("the 45009 never reached Redis: %q", rdb.Get(ctx, key).Val())
		}
		time.Sleep(5 * time.Millisecond) // polls Redis
	}
	other := strconv.FormatInt(time.Now().Add(2*time.Hour).UnixMicro(), 10) + "|45011"
	if err := rdb.Set(ctx, key, other, 2*time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if err := get("/reset"); err != nil {
		t.Fatal(err)
	}
	if v := rdb.Get(ctx, key).Val(); v != other {
		t.Fatalf("the penalty of another code after a reset of 45009: %q, want %q kept", v, other)
	}
	// This replica's 45009 is over: its next call meets the 45011.
	var pe *throttle.PenaltyError
	if err := get("/slow"); !errors.As(err, &pe) || pe.Code != "45011" {
		t.Fatalf("the next call after the reset: %v, want the 45011 penalty that stands", err)
	}
}

// okBase answers every call at once without an error code.
type okBase struct{}

func (okBase) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Header: http.Header{"X-Code": {"0"}}, Body: io.NopCloser(strings.NewReader(`{}`)), Request: req}, nil
}

// A 45009 to a call sent before a reset that another replica saw, arriving
// after it, penalises nothing: not the API on the replica that got it, not
// the fleet. Before, the replica that did not see the reset shut the API
// again until midnight, on every replica. A 45009 to a call sent after the
// reset penalises as ever.
func TestAnswerFromBeforeAResetOnAnotherReplica(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	prefix := limitertest.Group(t)
	replica := func(base http.RoundTripper, l limiter.Listener) func(string) error {
		lim := limiter.MustNewShared(rdb, limiter.SharedConfig{Prefix: prefix, Logger: quiet})
		lim.Listen(l)
		tr := throttle.MustNew(throttle.WithProfiles(resetProfile()), throttle.WithBase(base),
			throttle.WithLimiter(lim), throttle.WithoutTelemetry(), throttle.WithoutRetry(), throttle.WithLogger(quiet))
		t.Cleanup(func() { tr.Close(); lim.Close() })
		return provider(&http.Client{Transport: tr})
	}
	dropped, recorded := make(chan struct{}, 4), make(chan struct{}, 4)
	held := &heldBase{sent: make(chan struct{}), release: make(chan struct{})}
	b := replica(held, limiter.Listener{Event: func(kind, _ string) {
		if kind == "penalty_dropped" {
			dropped <- struct{}{}
		}
	}})
	a := replica(okBase{}, limiter.Listener{Penalty: func(string, limiter.Penalty) { recorded <- struct{}{} }})

	slow := make(chan error, 1)
	go func() { slow <- b("/slow") }()
	<-held.sent
	// The send reads late by one round trip to Redis (the penalty's own
	// way there: design.md, section 8), so a call sent within that of the
	// reset counts as after it. This gap puts the call clearly before.
	time.Sleep(200 * time.Millisecond)
	if err := a("/reset"); err != nil {
		t.Fatal(err)
	}
	close(held.release)
	if err := <-slow; err != nil {
		t.Fatal(err) // the 45009 reaches its caller as it came
	}
	// The replica's breaker closes before the drop is reported.
	select {
	case <-dropped:
	case <-time.After(10 * time.Second):
		t.Fatal("the 45009 from before the reset was not dropped within 10s")
	}
	key := "{" + prefix + ":p}:p:api:/slow"
	if n := rdb.Exists(context.Background(), key).Val(); n != 0 {
		t.Fatalf("the 45009 from before the reset was shared: %q", rdb.Get(context.Background(), key).Val())
	}
	if err := a("/slow"); err != nil {
		t.Fatalf("the replica that reset: %v, want the API called", err)
	}
	// The replica that got it closed its breaker again: its next call goes
	// out, and, sent after the reset, its 45009 penalises the fleet.
	held.sent, held.release = make(chan struct{}), make(chan struct{})
	close(held.release)
	if err := b("/slow"); err != nil {
		t.Fatalf("the replica that got the 45009 from before the reset: %v, want the API called", err)
	}
	select {
	case <-recorded:
	case <-time.After(10 * time.Second):
		t.Fatal("a 45009 to a call sent after the reset was not shared within 10s")
	}
	if err := a("/slow"); !errors.Is(err, throttle.ErrPenalized) {
		t.Fatalf("after a 45009 to a call sent after the reset: %v, want the scope penalised", err)
	}
}

// staleLimiter is a limiter that refuses every penalty as stale, as one
// recording the provider's resets would a penalty from before a reset.
type staleLimiter struct{ *limiter.Memory }

func (staleLimiter) Penalize(context.Context, string, limiter.Penalty) error {
	return limiter.ErrStalePenalty
}

// Whatever limiter refuses a penalty as stale, the replica's own breaker
// for it closes: its next call of the API goes out.
func TestAStalePenaltyClosesTheBreaker(t *testing.T) {
	base := &heldBase{sent: make(chan struct{}), release: make(chan struct{})}
	close(base.release)
	client := &http.Client{Transport: throttle.MustNew(throttle.WithProfiles(resetProfile()), throttle.WithBase(base),
		throttle.WithLimiter(staleLimiter{limiter.NewMemory()}), throttle.WithoutTelemetry(), throttle.WithoutRetry(), throttle.WithLogger(quiet))}
	get := provider(client)
	if err := get("/slow"); err != nil {
		t.Fatal(err) // the 45009 reaches its caller
	}
	// The penalty is written off the request path: polled until its
	// refusal has closed the breaker (a call refused by the breaker sends
	// nothing).
	base.sent = make(chan struct{})
	for deadline := time.Now().Add(5 * time.Second); ; {
		err := get("/slow")
		if err == nil {
			break
		}
		if !errors.Is(err, throttle.ErrPenalized) || time.Now().After(deadline) {
			t.Fatalf("after a penalty the limiter refused as stale: %v, want the API called", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// heldPenalties is a shared limiter whose penalty write waits on release,
// after it has stored the penalty or, with before, before it does, having
// said so on held: a reset then comes while the penalty is being shared.
// With failRecord its RecordReset fails. It notes the answers of the
// conditional lifts made once released: the write's second look.
type heldPenalties struct {
	*limiter.Shared
	before, failRecord bool
	held, release      chan struct{}
	releaseOnce        sync.Once
	released           atomic.Bool
	mu                 sync.Mutex
	lifts              []error
}

// heldWrites returns a Transport over base, resetProfile's, whose penalty
// writes h holds (before they store with before; failRecord as above), and
// the key of /slow's penalty; the cleanup lets the write go and closes the
// Transport.
func heldWrites(t *testing.T, base http.RoundTripper, before, failRecord bool) (h *heldPenalties, tr *throttle.Transport, rdb *redis.Client, key string) {
	rdb = redistest.Shared(t).Client(t)
	prefix := limitertest.Group(t)
	shared := limiter.MustNewShared(rdb, limiter.SharedConfig{Prefix: prefix, Logger: quiet})
	t.Cleanup(func() { shared.Close() })
	h = &heldPenalties{Shared: shared, before: before, failRecord: failRecord, held: make(chan struct{}, 1), release: make(chan struct{})}
	tr = throttle.MustNew(throttle.WithProfiles(resetProfile()), throttle.WithBase(base),
		throttle.WithLimiter(h), throttle.WithoutTelemetry(), throttle.WithoutRetry(), throttle.WithLogger(quiet))
	t.Cleanup(func() { h.free(); tr.Close() })
	return h, tr, rdb, "{" + prefix + ":p}:p:api:/slow"
}

// free lets the held write go on.
func (h *heldPenalties) free() {
	h.releaseOnce.Do(func() {
		h.released.Store(true)
		close(h.release)
	})
}

// awaitWrite waits, at most 10 s, for the write of the 45009 to be held.
func (h *heldPenalties) awaitWrite(t *testing.T) {
	t.Helper()
	select {
	case <-h.held:
	case <-time.After(10 * time.Second):
		t.Fatal("the write of the 45009 did not start within 10s")
	}
}

func (h *heldPenalties) Penalize(ctx context.Context, group string, p limiter.Penalty) error {
	_, err := h.PenalizeStored(ctx, group, p)
	return err
}

func (h *heldPenalties) PenalizeStored(ctx context.Context, group string, p limiter.Penalty) (string, error) {
	if h.before {
		h.held <- struct{}{}
		<-h.release
	}
	stored, err := h.Shared.PenalizeStored(ctx, group, p)
	if !h.before {
		h.held <- struct{}{}
		<-h.release
	}
	return stored, err
}

func (h *heldPenalties) RecordReset(ctx context.Context, group, code string, scopes []string) error {
	if h.failRecord {
		return errors.New("the record of the reset failed")
	}
	return h.Shared.RecordReset(ctx, group, code, scopes)
}

func (h *heldPenalties) LiftPenaltyIf(ctx context.Context, group, scope string, seen *inspect.PenaltyState) (bool, error) {
	ok, err := h.Shared.LiftPenaltyIf(ctx, group, scope, seen)
	if h.released.Load() {
		h.mu.Lock()
		h.lifts = append(h.lifts, err)
		h.mu.Unlock()
	}
	return ok, err
}

// A reset that comes while a penalty of its code is being shared ends that
// penalty, but not what Redis holds on the scope by the time the write
// looks again: a penalty of another code, or one of the same code to a
// call sent after the reset (on another replica). Before, the write's
// second look deleted whatever was there. A write that lands after the
// reset has read the penalties (its record failed, or the call went out
// within a round trip of it) is lifted by that second look all the same.
func TestResetDuringAPenaltyWriteLiftsOnlyWhatItWrote(t *testing.T) {
	for _, tc := range []struct {
		name           string
		before, failed bool
		since          string // the code of a penalty recorded after the reset, or none
		wantLift       error  // the second look's conditional lift
	}{
		{name: "another code since", since: "45011", wantLift: limiter.ErrPenaltyChanged},
		{name: "the same code since", since: "45009", wantLift: limiter.ErrPenaltyChanged},
		{name: "written after the reset read", before: true, failed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := &heldBase{sent: make(chan struct{}), release: make(chan struct{})}
			close(base.release)
			lim, tr, rdb, key := heldWrites(t, base, tc.before, tc.failed)
			get := provider(&http.Client{Transport: tr})
			ctx := context.Background()
			if err := get("/slow"); err != nil {
				t.Fatal(err)
			}
			lim.awaitWrite(t)
			if err := get("/reset"); err != nil {
				t.Fatal(err)
			}
			if n := rdb.Exists(ctx, key).Val(); n != 0 {
				t.Fatalf("the 45009 written before the reset outlived it: %q", rdb.Get(ctx, key).Val())
			}
			var since string
			if tc.since != "" {
				since = strconv.FormatInt(time.Now().Add(2*time.Hour).UnixMicro(), 10) + "|" + tc.since
				if err := rdb.Set(ctx, key, since, 2*time.Hour).Err(); err != nil {
					t.Fatal(err)
				}
			}
			lim.free()
			if err := tr.Close(); err != nil { // waits for the write
				t.Fatal(err)
			}
			if v := rdb.Get(ctx, key).Val(); v != since {
				t.Fatalf("after the write ended: %q, want %q", v, since)
			}
			lim.mu.Lock()
			defer lim.mu.Unlock()
			if len(lim.lifts) != 1 || !errors.Is(lim.lifts[0], tc.wantLift) && lim.lifts[0] != tc.wantLift {
				t.Fatalf("the write's second look: conditional lifts answered %v, want one answered %v", lim.lifts, tc.wantLift)
			}
		})
	}
}

// heldReplies is an in-memory limiter whose first reserve reads its answer
// at once but hands it back only once release is closed, having said so
// on read: a reset's lifts then come between the read and the reply.
type heldReplies struct {
	*limiter.Memory
	first         atomic.Bool
	read, release chan struct{}
}

func (h *heldReplies) Reserve(ctx context.Context, req limiter.Request) (limiter.Reservation, error) {
	res, err := h.Memory.Reserve(ctx, req)
	if h.first.CompareAndSwap(false, true) {
		h.read <- struct{}{}
		<-h.release
	}
	return res, err
}

// A reserve's reply that read a penalty before a reset lifted it, arriving
// after the lift, asks again rather than open the breaker: the reset's
// lifts are noted as any lift is. Before, the breaker stayed open until
// the penalty's end (midnight, for a 45009) and no reserve came to close it.
func TestReplyReadBeforeAResetOpensNoBreaker(t *testing.T) {
	m := limiter.NewMemory()
	if err := m.Penalize(context.Background(), "p", limiter.Penalty{Scope: "api:/slow", Until: time.Now().Add(time.Hour), Code: "45009"}); err != nil {
		t.Fatal(err)
	}
	lim := &heldReplies{Memory: m, read: make(chan struct{}, 1), release: make(chan struct{})}
	var once sync.Once
	free := func() { once.Do(func() { close(lim.release) }) }
	tr := throttle.MustNew(throttle.WithProfiles(resetProfile()), throttle.WithBase(okBase{}), throttle.WithLimiter(lim),
		throttle.WithoutTelemetry(), throttle.WithoutRetry(), throttle.WithLogger(quiet))
	t.Cleanup(func() { free(); tr.Close() })
	get := provider(&http.Client{Transport: tr})
	slow := make(chan error, 1)
	go func() { slow <- get("/slow") }()
	select {
	case <-lim.read:
	case <-time.After(10 * time.Second):
		t.Fatal("the reserve of /slow did not read within 10s")
	}
	if err := get("/reset"); err != nil {
		t.Fatal(err)
	}
	free()
	select {
	case err := <-slow:
		if err != nil {
			t.Fatalf("the call whose reply read the penalty before the reset: %v, want it sent", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call of /slow did not end within 10s")
	}
	if err := get("/slow"); err != nil {
		t.Fatalf("the next call after the reset: %v, want it sent", err)
	}
}

// onceHeldBase holds the first call of /slow until release is closed
// (sent is closed once it has gone) and answers 45009 to every /slow.
type onceHeldBase struct {
	once          sync.Once
	sent, release chan struct{}
}

func (b *onceHeldBase) RoundTrip(req *http.Request) (*http.Response, error) {
	code := "0"
	if req.URL.Path == "/slow" {
		b.once.Do(func() {
			close(b.sent)
			<-b.release
		})
		code = "45009"
	}
	return &http.Response{StatusCode: 200, Header: http.Header{"X-Code": {code}}, Body: io.NopCloser(strings.NewReader(`{}`)), Request: req}, nil
}

// The write of a penalty that a reset ended closes the breaker only while
// it holds that penalty: one opened meanwhile for a longer penalty of
// another code stays open. Before, the write closed it whatever it held,
// and calls went out inside a penalty that stood.
func TestResetDuringAPenaltyWriteKeepsALongerBreaker(t *testing.T) {
	base := &onceHeldBase{sent: make(chan struct{}), release: make(chan struct{})}
	lim, tr, rdb, key := heldWrites(t, base, false, false)
	var baseOnce sync.Once
	freeBase := func() { baseOnce.Do(func() { close(base.release) }) }
	t.Cleanup(freeBase) // runs before heldWrites' cleanup
	get := provider(&http.Client{Transport: tr})
	ctx := context.Background()
	slow := make(chan error, 1)
	go func() { slow <- get("/slow") }()
	select {
	case <-base.sent:
	case <-time.After(10 * time.Second):
		t.Fatal("the first call of /slow was not sent within 10s")
	}
	// Meanwhile a longer penalty of another code: the next call meets it
	// and opens the breaker for it.
	if err := rdb.Set(ctx, key, strconv.FormatInt(time.Now().Add(2*time.Hour).UnixMicro(), 10)+"|45011", 2*time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	var pe *throttle.PenaltyError
	if err := get("/slow"); !errors.As(err, &pe) || pe.Code != "45011" {
		t.Fatalf("a call during the 45011: %v, want it refused", err)
	}
	// The first call's 45009 comes; its write waits while the reset comes.
	freeBase()
	select {
	case err := <-slow:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the first call of /slow did not end within 10s")
	}
	lim.awaitWrite(t)
	if err := get("/reset"); err != nil {
		t.Fatal(err)
	}
	lim.free()
	if err := tr.Close(); err != nil { // waits for the write
		t.Fatal(err)
	}
	// Redis forgets the 45011: only the breaker can refuse now.
	if err := rdb.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	if err := get("/slow"); !errors.As(err, &pe) || pe.Code != "45011" {
		t.Fatalf("a call after the write ended: %v, want it refused by the 45011's breaker", err)
	}
}
