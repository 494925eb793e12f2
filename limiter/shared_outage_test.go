package limiter_test

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/limitertest"
	"github.com/quotaware/throttle/limiter/rule"
)

// 11.9: a penalty taken while Redis is away is written to Redis (and so
// announced) once it is back, unless it is over by then.
func TestSharedWritesOutagePenaltiesLater(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialTimeout: 100 * time.Millisecond, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	s := newShared(t, c, limiter.SharedConfig{Share: 1, Timeout: 200 * time.Millisecond, Probe: 20 * time.Millisecond, Recover: 50 * time.Millisecond})
	ctx := context.Background()
	req := limiter.Request{Group: "g", Rules: []rule.Rule{rule.Must(rule.New("api", 1000, time.Second))}, MaxWait: time.Second}
	if _, err := s.Reserve(ctx, req); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	if res, err := s.Reserve(ctx, req); err != nil || !res.Local() || !s.Down() {
		t.Fatalf("with Redis stopped: %+v %v down=%v, want a local slot", res, err, s.Down())
	}
	long := limiter.Penalty{Scope: "app", Until: time.Now().Add(time.Hour).Truncate(time.Microsecond), Code: "90018"}
	short := limiter.Penalty{Scope: "api:/x", Until: time.Now().Add(time.Millisecond), Code: "90018"}
	for _, p := range []limiter.Penalty{long, short} {
		if err := s.Penalize(ctx, "g", p); err != nil {
			t.Fatalf("Penalize during the outage: %v", err)
		}
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.Down() {
		if time.Now().After(deadline) {
			t.Fatal("not back on Redis 10s after it restarted")
		}
		_, _ = s.Reserve(ctx, req)
		time.Sleep(10 * time.Millisecond) // the probe interval is the behaviour under test
	}
	// The writer retries in the background, whatever this replica calls.
	check := srv.Client(t)
	got, err := check.Get(ctx, s.Redis().PenaltyKey("g", "app")).Result()
	for deadline := time.Now().Add(10 * time.Second); err != nil; {
		if time.Now().After(deadline) {
			t.Fatalf("the outage's penalty is not in Redis 10s after it came back: %v", err)
		}
		time.Sleep(10 * time.Millisecond) // polling a background write
		got, err = check.Get(ctx, s.Redis().PenaltyKey("g", "app")).Result()
	}
	s.Close() // waits for the background writes
	if want := strconv.FormatInt(long.Until.UnixMicro(), 10) + "|90018"; got != want {
		t.Fatalf("penalty key %q, want the end %d and code 90018", got, long.Until.UnixMicro())
	}
	if n := check.Exists(ctx, s.Redis().PenaltyKey("g", "api:/x")).Val(); n != 0 {
		t.Fatal("a penalty over before Redis came back was written")
	}
}

// stall holds reserve calls before they reach Redis until released or
// their context ends.
type stall struct {
	entered chan struct{}
	release chan struct{}
	open    atomic.Bool
}

func (s *stall) DialHook(next redis.DialHook) redis.DialHook { return next }
func (s *stall) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (s *stall) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if s.open.Load() || cmd.Name() != "evalsha" || len(args) < 2 || args[1] != limiter.ReserveSHA && args[1] != limiter.OneSHA {
			return next(ctx, cmd)
		}
		s.entered <- struct{}{}
		select {
		case <-s.release:
			return next(ctx, cmd)
		case <-ctx.Done():
			cmd.SetErr(ctx.Err())
			return ctx.Err()
		}
	}
}

// 11.10: time queued behind another call does not count against the
// timeout; a caller cancelled during its call gets its context's error and
// the requests queued behind it are served; an invalid request is a
// configuration error. None of them makes Redis count as down.
func TestSharedQueueAndInvalid(t *testing.T) {
	const timeout = 300 * time.Millisecond
	warmUp := func(t *testing.T, c redis.UniversalClient, s *limiter.Shared, req limiter.Request) {
		if err := limiter.LoadScripts(context.Background(), c); err != nil {
			t.Fatal(err)
		}
		warm := req
		warm.Group += "-warm"
		res, err := s.Reserve(context.Background(), warm)
		if err != nil {
			t.Fatal(err)
		}
		_ = res.Cancel(context.Background())
	}
	queued := make(chan struct{}, 16)
	var group atomic.Value
	group.Store("")
	limiter.SetOnQueued(func(g string) {
		if g == group.Load().(string) {
			queued <- struct{}{}
		}
	})
	t.Cleanup(func() { limiter.SetOnQueued(nil) })
	rl := rule.Must(rule.New("paced", 10, time.Minute))

	t.Run("queue time", func(t *testing.T) {
		c := redistest.Shared(t).Client(t)
		s := newShared(t, c, limiter.SharedConfig{Prefix: limitertest.Group(t), Share: 1, Mode: limiter.OutageRefuse, Timeout: timeout})
		req := limiter.Request{Group: limitertest.Group(t), Rules: []rule.Rule{rl}, MaxWait: time.Hour}
		group.Store(req.Group)
		warmUp(t, c, s, req)
		g := newGate()
		c.AddHook(g)
		t.Cleanup(func() { g.open.Store(true) })
		first := reserveAsync(context.Background(), s, req)
		<-g.held
		second := reserveAsync(context.Background(), s, req)
		<-queued
		// Queued for twice the timeout while the first call is held after
		// Redis answered it (the wait is the behaviour under test).
		time.Sleep(2 * timeout)
		g.release <- struct{}{}
		<-g.held
		g.release <- struct{}{}
		for i, o := range []outcome{<-first, <-second} {
			if o.err != nil || !o.res.OK() {
				t.Errorf("request %d: %+v %v, want a slot", i, o.res, o.err)
			}
		}
		if s.Down() {
			t.Error("time queued behind a call counted against the timeout: Redis counts as down")
		}
	})

	t.Run("cancelled in flight", func(t *testing.T) {
		c := redistest.Shared(t).Client(t)
		s := newShared(t, c, limiter.SharedConfig{Prefix: limitertest.Group(t), Share: 1, Mode: limiter.OutageRefuse, Timeout: time.Minute})
		req := limiter.Request{Group: limitertest.Group(t), Rules: []rule.Rule{rl}, MaxWait: time.Hour}
		group.Store(req.Group)
		warmUp(t, c, s, req)
		h := &stall{entered: make(chan struct{}, 4), release: make(chan struct{})}
		c.AddHook(h)
		t.Cleanup(func() { h.open.Store(true) })
		ctx, cancel := context.WithCancel(context.Background())
		first := reserveAsync(ctx, s, req)
		<-h.entered
		second := reserveAsync(context.Background(), s, req)
		<-queued
		cancel()
		if o := <-first; !errors.Is(o.err, context.Canceled) || errors.Is(o.err, limiter.ErrUnavailable) {
			t.Errorf("cancelled in its call: %v, want context.Canceled alone", o.err)
		}
		<-h.entered
		h.release <- struct{}{}
		if o := <-second; o.err != nil || !o.res.OK() {
			t.Errorf("queued behind the cancelled call: %+v %v, want a slot", o.res, o.err)
		}
		if s.Down() {
			t.Error("a cancelled caller made Redis count as down")
		}
	})

	t.Run("invalid request", func(t *testing.T) {
		s := newShared(t, redistest.Shared(t).Client(t), limiter.SharedConfig{Prefix: limitertest.Group(t), Share: 1})
		req := limiter.Request{Group: "g", Rules: []rule.Rule{rl}, Scopes: []string{strings.Repeat("s", rule.MaxKeyLen+1)}}
		_, err := s.Reserve(context.Background(), req)
		if !errors.Is(err, limiter.ErrInvalidRequest) || errors.Is(err, limiter.ErrUnavailable) {
			t.Errorf("a scope over %d bytes: %v, want ErrInvalidRequest and not ErrUnavailable", rule.MaxKeyLen, err)
		}
		if s.Down() {
			t.Error("an invalid request made Redis count as down")
		}
	})
}

// Each rule has its own local share during an outage: two groups' rules
// of one key and limit but different periods (10 a second, 10 an hour)
// used to get whichever share was built first.
func TestOutageShareIsEachRulesOwn(t *testing.T) {
	srv := redistest.Start(t)
	s := newShared(t, srv.Client(t), limiter.SharedConfig{Share: 0.5, Probe: time.Hour})
	srv.Stop()
	ctx := context.Background()
	perSecond := rule.Must(rule.New("api", 10, time.Second)) // a share of 5 a second
	perHour := rule.Must(rule.New("api", 10, time.Hour))     // 5 an hour, one per 12 minutes
	if res, err := s.Reserve(ctx, limiter.Request{Group: "g1", Rules: []rule.Rule{perSecond}}); err != nil || !res.Local() {
		t.Fatalf("first reserve in the outage: local %v, %v", res.Local(), err)
	}
	req := limiter.Request{Group: "g2", Rules: []rule.Rule{perHour}, MaxWait: 2 * time.Second}
	admitted := 0
	for range 5 {
		res, err := s.Reserve(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if res.OK() {
			admitted++
		}
	}
	if admitted != 1 {
		t.Fatalf("half of a 10-an-hour rule admitted %d requests within 2 s, want 1", admitted)
	}
}

// A Share outside (0, 1] is refused where the limiter is built, naming the
// field: NaN slipped through the range check.
func TestShareOutOfRangeRefused(t *testing.T) {
	c := redistest.Shared(t).Client(t)
	for _, share := range []float64{math.NaN(), -0.1, 1.5, math.Inf(1)} {
		if _, err := limiter.NewShared(c, limiter.SharedConfig{Share: share}); err == nil || !strings.Contains(err.Error(), "Share") {
			t.Errorf("Share %v: %v, want an error naming Share", share, err)
		}
	}
}

// A request refused during an outage (OutageRefuse) says what failed, the
// address and the dial error, not only that Redis is down: on-call reads
// it from the caller's error.
func TestOutageRefusalNamesTheFailure(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialTimeout: 100 * time.Millisecond, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	s := newShared(t, c, limiter.SharedConfig{Prefix: limitertest.Group(t), Share: 1, Mode: limiter.OutageRefuse, Timeout: 200 * time.Millisecond, Probe: time.Hour})
	ctx := context.Background()
	req := limiter.Request{Group: "g", Rules: []rule.Rule{rule.Must(rule.New("api", 1000, time.Second))}, MaxWait: time.Second}
	if _, err := s.Reserve(ctx, req); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	for i := range 2 { // the call that finds Redis away, then one refused while it is down
		_, err := s.Reserve(ctx, req)
		if !errors.Is(err, limiter.ErrUnavailable) || !strings.Contains(err.Error(), srv.Addr) {
			t.Fatalf("request %d with Redis stopped: %v, want ErrUnavailable naming %s", i, err, srv.Addr)
		}
	}
	if !s.Down() {
		t.Fatal("not down with Redis stopped")
	}
}
