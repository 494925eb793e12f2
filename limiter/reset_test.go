package limiter_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/inspect"
	"github.com/quotaware/throttle/limiter/limitertest"
	"github.com/quotaware/throttle/limiter/rule"
	"github.com/redis/go-redis/v9"
)

// After a reset of the provider's quota is recorded, a penalty of the
// reset's code on one of its scopes whose call was sent before the reset
// is not recorded, on any replica: the provider answered that call before
// it reset the count. Every other penalty is: another code, another scope,
// a call sent after the reset, or one whose send is unknown.
func TestPenaltyFromBeforeAResetIsNotRecorded(t *testing.T) {
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	prefix := limitertest.Group(t)
	var logs syncBuffer
	a := newShared(t, rdb, limiter.SharedConfig{Prefix: prefix, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	b := newShared(t, rdb, limiter.SharedConfig{Prefix: prefix, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	ctx := context.Background()
	const g = "wechat"
	key := func(scope string) string { return "{" + prefix + ":" + g + "}:p:" + scope }
	// A call sent a minute before the reset: far more than any round trip
	// to Redis could blur.
	before := time.Now().Add(-time.Minute)
	if err := a.RecordReset(ctx, g, "45009", []string{"api:a", "api:b"}); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	until := time.Now().Add(time.Hour)

	err := b.Penalize(ctx, g, limiter.Penalty{Scope: "api:a", Until: until, Code: "45009", Sent: before})
	if !errors.Is(err, limiter.ErrStalePenalty) {
		t.Fatalf("a 45009 to a call sent before the reset: %v, want ErrStalePenalty", err)
	}
	if n := rdb.Exists(ctx, key("api:a")).Val(); n != 0 {
		t.Fatalf("the stale penalty was written to Redis: %q", rdb.Get(ctx, key("api:a")).Val())
	}
	if !strings.Contains(logs.String(), "sent before the provider reset") {
		t.Fatalf("the dropped penalty was not logged: %q", logs.String())
	}
	// The reserve that follows, on either replica, is not refused.
	for _, l := range []*limiter.Shared{a, b} {
		res, err := l.Reserve(ctx, limiter.Request{Group: g, Scopes: []string{"api:a"}, Rules: []rule.Rule{hot("api:a")}})
		if err != nil || !res.OK() {
			t.Fatalf("reserve after the stale penalty: %+v %v, want admitted", res, err)
		}
	}

	for _, p := range []limiter.Penalty{
		{Scope: "api:a", Until: until, Code: "45011", Sent: before}, // another code
		{Scope: "api:c", Until: until, Code: "45009", Sent: before}, // a scope the reset did not name
		{Scope: "api:b", Until: until, Code: "45009", Sent: after},  // sent after the reset
		{Scope: "api:b", Until: until.Add(time.Second), Code: "45009"},
	} {
		if err := b.Penalize(ctx, g, p); err != nil {
			t.Fatalf("Penalize(%+v): %v", p, err)
		}
		if n := rdb.Exists(ctx, key(p.Scope)).Val(); n != 1 {
			t.Fatalf("Penalize(%+v) left no penalty in Redis", p)
		}
	}
	if ttl := rdb.PTTL(ctx, "{"+prefix+":"+g+"}:resets").Val(); ttl < 23*time.Hour || ttl > 24*time.Hour {
		t.Fatalf("the record of resets lives %v, want about a day", ttl)
	}
}

// RecordReset rejects what it cannot record, naming it.
func TestRecordResetRejectsBadInput(t *testing.T) {
	l := newShared(t, redistest.Shared(t).Client(t), limiter.SharedConfig{Prefix: limitertest.Group(t)})
	ctx := context.Background()
	for name, call := range map[string]func() error{
		"group with a brace": func() error { return l.RecordReset(ctx, "a}b", "45009", []string{"api:a"}) },
		"empty code":         func() error { return l.RecordReset(ctx, "g", "", []string{"api:a"}) },
		"empty scope":        func() error { return l.RecordReset(ctx, "g", "45009", []string{""}) },
	} {
		if err := call(); !errors.Is(err, limiter.ErrInvalidRequest) {
			t.Errorf("%s: %v, want ErrInvalidRequest", name, err)
		}
	}
	if err := l.RecordReset(ctx, "g", "45009", nil); err != nil {
		t.Errorf("no scopes: %v, want nil (nothing to record)", err)
	}
}

// A record of resets that holds another type is replaced and reported,
// not an error: kept, it would fail every reset's record from then on.
func TestRecordResetReplacesAnotherType(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	prefix := limitertest.Group(t)
	events := make(chan string, 4)
	l := newShared(t, rdb, limiter.SharedConfig{Prefix: prefix, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		limiter.Listener{Event: func(kind, _ string) { events <- kind }})
	ctx := context.Background()
	key := "{" + prefix + ":g}:resets"
	if err := rdb.Set(ctx, key, "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := l.RecordReset(ctx, "g", "45009", []string{"api:a"}); err != nil {
		t.Fatalf("RecordReset over a string: %v", err)
	}
	if ty := rdb.Type(ctx, key).Val(); ty != "hash" || rdb.PTTL(ctx, key).Val() <= 0 {
		t.Fatalf("the record after RecordReset: type %s, TTL %v; want a hash that expires", ty, rdb.PTTL(ctx, key).Val())
	}
	// Events are told before the call returns.
	for seen := ""; seen != "corrupt_value"; {
		select {
		case seen = <-events:
		default:
			t.Fatal("the replaced record was not reported as a corrupt_value event")
		}
	}
}

// outage fails every command of its client while down is set, as a
// replica cut off from Redis sees it, and tells written of each penalize
// call that reached Redis.
type outage struct {
	down    atomic.Bool
	written chan struct{}
}

func (o *outage) DialHook(next redis.DialHook) redis.DialHook { return next }
func (o *outage) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if o.down.Load() {
			return errCutOff
		}
		return next(ctx, cmds)
	}
}
func (o *outage) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if o.down.Load() {
			cmd.SetErr(errCutOff)
			return errCutOff
		}
		err := next(ctx, cmd)
		if args := cmd.Args(); cmd.Name() == "evalsha" && len(args) > 1 && args[1] == limiter.PenalizeSHA {
			o.written <- struct{}{}
		}
		return err
	}
}

var errCutOff = errors.New("cut off from Redis")

// A penalty this replica kept while it could not reach Redis, whose call
// was sent before a reset another replica recorded meanwhile, is neither
// written once Redis answers again nor kept for the next outage, and the
// replica is told (Listener.Stale) so that its own stop ends; nor is one
// refused as stale while Redis answers kept for an outage.
func TestOutagePenaltyFromBeforeAResetIsDropped(t *testing.T) {
	srv := redistest.Shared(t)
	prefix := limitertest.Group(t)
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	if err := limiter.LoadScripts(ctx, c); err != nil {
		t.Fatal(err)
	}
	o := &outage{written: make(chan struct{}, 16)}
	c.AddHook(o)
	stale := make(chan string, 4)
	b := newShared(t, c, limiter.SharedConfig{Prefix: prefix, Share: 1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Timeout: 200 * time.Millisecond, Probe: 20 * time.Millisecond, Recover: 20 * time.Millisecond},
		limiter.Listener{Stale: func(_ string, p limiter.Penalty) { stale <- p.Scope }})
	a := newShared(t, srv.Client(t), limiter.SharedConfig{Prefix: prefix})
	const g = "wechat"
	req := limiter.Request{Group: g, Scopes: []string{"api:a", "api:b"}, Rules: []rule.Rule{hot("api:a")}}
	sent := time.Now().Add(-time.Minute)
	until := time.Now().Add(time.Hour)

	// Redis answering: the stale penalty is refused and not kept either.
	if err := a.RecordReset(ctx, g, "45009", []string{"api:a", "api:b"}); err != nil {
		t.Fatal(err)
	}
	if err := b.Penalize(ctx, g, limiter.Penalty{Scope: "api:b", Until: until, Code: "45009", Sent: sent}); !errors.Is(err, limiter.ErrStalePenalty) {
		t.Fatalf("a stale penalty with Redis answering: %v, want ErrStalePenalty", err)
	}
	receive(t, o.written, "the penalty's write never reached Redis")
	// Told before Penalize returns.
	select {
	case sc := <-stale:
		if sc != "api:b" {
			t.Fatalf("Stale told of %q, want api:b", sc)
		}
	default:
		t.Fatal("the replica was not told that its penalty was stale")
	}
	// Cut off: this one is kept, and tried once Redis answers again.
	o.down.Store(true)
	_ = b.Penalize(ctx, g, limiter.Penalty{Scope: "api:a", Until: until, Code: "45009", Sent: sent})
	o.down.Store(false)
	receive(t, o.written, "the kept penalty was not tried 10s after Redis answered again")
	if sc := receive(t, stale, "the replica was not told that the kept penalty was stale"); sc != "api:a" {
		t.Fatalf("Stale told of %q, want api:a", sc)
	}
	if n := srv.Client(t).Exists(ctx, "{"+prefix+":"+g+"}:p:api:a").Val(); n != 0 {
		t.Fatal("the penalty kept through the outage was written after the reset")
	}
	// Cut off again, the replica limits alone: the dropped penalty is not
	// among what it holds.
	// (The copy goes right after the write's answer, which the hook saw
	// first: polled.)
	o.down.Store(true)
	for deadline := time.Now().Add(5 * time.Second); ; {
		res, err := b.Reserve(ctx, req)
		if err == nil && res.OK() && res.Local() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("reserve cut off again: %+v %v, want a local slot, not the dropped penalty", res, err)
		}
		time.Sleep(5 * time.Millisecond) // polls the replica's local state
	}
}

// receive returns the next value of ch, failing the test with why when
// none comes within 10 s.
func receive[T any](t *testing.T, ch <-chan T, why string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal(why)
		panic("unreachable")
	}
}

// staleStub is a primary that is away while down, refuses as stale a
// penalty sent before reset (once entered has been told and release
// closed), is away for any other while holding, and else writes it.
type staleStub struct {
	*limiter.Memory
	reset            time.Time
	down, holding    atomic.Bool
	entered, release chan struct{}
	written          chan limiter.Penalty
}

func (s *staleStub) Penalize(_ context.Context, _ string, p limiter.Penalty) error {
	switch {
	case s.down.Load():
		return limiter.ErrUnavailable
	case p.Sent.Before(s.reset):
		s.entered <- struct{}{}
		<-s.release
		return limiter.ErrStalePenalty
	case s.holding.Load():
		return limiter.ErrUnavailable
	}
	s.written <- p
	return nil
}

// Two penalties kept through an outage with one end and code, a stale one
// and a fresh one that replaced it while the stale one was being written:
// dropping the stale one leaves the fresh one kept, and it is written.
func TestOutageFreshPenaltyOutlivesAStaleOneOfTheSameEnd(t *testing.T) {
	stub := &staleStub{Memory: limiter.NewMemory(), reset: time.Now(), entered: make(chan struct{}, 1),
		release: make(chan struct{}), written: make(chan limiter.Penalty, 4)}
	f := limiter.NewFailover(stub, limiter.FailoverConfig{Share: func() float64 { return 1 }, Probe: 10 * time.Millisecond})
	t.Cleanup(f.Close)
	ctx := context.Background()
	until := time.Now().Add(time.Hour)
	stale := limiter.Penalty{Scope: "api:a", Until: until, Code: "45009", Sent: stub.reset.Add(-time.Minute)}
	fresh := stale
	fresh.Sent = stub.reset.Add(time.Second)

	stub.down.Store(true)
	_ = f.Penalize(ctx, "g", stale) // kept
	stub.down.Store(false)
	// The stale one is being written.
	receive(t, stub.entered, "the kept penalty was not written 10s after the primary came back")
	stub.holding.Store(true)
	_ = f.Penalize(ctx, "g", fresh) // kept in its place
	stub.holding.Store(false)
	close(stub.release)
	if p := receive(t, stub.written, "the fresh penalty kept in the stale one's place was never written"); !p.Sent.Equal(fresh.Sent) {
		t.Fatalf("written %+v, want the fresh penalty", p)
	}
}

// PenalizeStored says what it stored, byte for byte what Redis holds, so
// that LiftPenaltyIf can lift exactly that penalty; "" when it stored
// nothing: a penalty ending no earlier was there, or the penalty was older
// than a reset of its quota.
func TestPenalizeStoredIsTheValueInRedis(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	prefix := limitertest.Group(t)
	s := newShared(t, rdb, limiter.SharedConfig{Prefix: prefix, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx := context.Background()
	const g = "wechat"
	key := "{" + prefix + ":" + g + "}:p:api:a"
	end := time.Now().Add(time.Hour)
	stored, err := s.PenalizeStored(ctx, g, limiter.Penalty{Scope: "api:a", Until: end, Code: "45009", Sent: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if v := rdb.Get(ctx, key).Val(); stored == "" || stored != v {
		t.Fatalf("stored %q, Redis holds %q", stored, v)
	}
	// Shorter than the one there: nothing of it stored.
	if stored, err := s.PenalizeStored(ctx, g, limiter.Penalty{Scope: "api:a", Until: end.Add(-time.Minute), Code: "45011"}); err != nil || stored != "" {
		t.Fatalf("a shorter penalty: stored %q, %v; want nothing stored", stored, err)
	}
	// Older than a reset of its quota: refused, nothing stored.
	if err := s.RecordReset(ctx, g, "45009", []string{"api:b"}); err != nil {
		t.Fatal(err)
	}
	stale := limiter.Penalty{Scope: "api:b", Until: end, Code: "45009", Sent: time.Now().Add(-time.Minute)}
	if stored, err := s.PenalizeStored(ctx, g, stale); !errors.Is(err, limiter.ErrStalePenalty) || stored != "" {
		t.Fatalf("a penalty from before a reset: stored %q, %v; want nothing stored, ErrStalePenalty", stored, err)
	}
	// What it stored is what LiftPenaltyIf takes.
	seen := &inspect.PenaltyState{Scope: "api:a", Value: stored}
	if removed, err := s.LiftPenaltyIf(ctx, g, "api:a", seen); err != nil || !removed {
		t.Fatalf("lift of what was stored: %v, %v", removed, err)
	}
}
