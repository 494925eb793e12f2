package limiter_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/rule"
)

// A request cancelled while its own call is in flight (the call made at
// once, without load) is told so, and the slot Redis booked for it is given
// back, as for a request cancelled while its shared call is in flight.
func TestCancelDuringOwnCallGivesSlotBack(t *testing.T) {
	l, g, req, _ := coalescing(t)
	bg := context.Background()
	ctx, cancel := context.WithCancel(bg)
	own := reserveAsync(ctx, l, req)
	<-g.held // Redis has answered; the reply is on its way
	cancel()
	g.release <- struct{}{}
	if o := <-own; !errors.Is(o.err, context.Canceled) || errors.Is(o.err, limiter.ErrUnavailable) {
		t.Fatalf("cancelled during its call: %+v %v, want context.Canceled alone", o.res, o.err)
	}
	<-g.cancelled
	g.open.Store(true)
	next, err := l.Reserve(bg, req)
	if err != nil {
		t.Fatal(err)
	}
	if !next.OK() || next.Delay() != 0 {
		t.Fatalf("after the cancelled request's slot was given back: %+v, want the slot at once", next)
	}
}

// A request whose deadline passes during its own call, on a client that
// applies context deadlines to its socket, returns at its deadline with
// context.DeadlineExceeded, never a store failure: the client reports the
// socket's timeout as soon as the deadline passes, before the context says
// so, and that used to count as Redis failing.
func TestDeadlineDuringOwnCallIsTheCallers(t *testing.T) {
	s, admin, probe := sharedOnSocketDeadlines(t, "deadline", 5*time.Second)
	ctx := context.Background()
	one := rule.Must(rule.New("k", 1, time.Hour))
	// The script loaded, and the pool holding a connection.
	if _, err := s.Reserve(ctx, limiter.Request{Group: "warm", Rules: []rule.Rule{one}}); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		// Redis busy in a script for a second, as on a loaded server.
		busy := keepBusy(admin, probe, time.Second)
		dctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		_, err := s.Reserve(dctx, limiter.Request{Group: "g", Rules: []rule.Rule{one}})
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, limiter.ErrUnavailable) {
			t.Fatalf("reserve past its deadline: %v, want context.DeadlineExceeded alone", err)
		}
		if err := <-busy; err != nil {
			t.Fatal(err)
		}
		if s.Down() {
			t.Fatal("the caller's deadline made Redis count as down")
		}
	}
}

// SharedConfig.Timeout bounds every call to Redis whatever the caller's
// context: while Redis is busy in a script for three seconds, a
// reservation made without a deadline through the Shared limiter and one
// made on its Redis limiter directly both end in a store failure. Had the
// bound been lost, each would have waited for Redis and been admitted.
func TestTimeoutBoundsCallsWithoutDeadline(t *testing.T) {
	s, admin, probe := sharedOnSocketDeadlines(t, "bound", 100*time.Millisecond)
	ctx := context.Background()
	one := rule.Must(rule.New("k", 1000, time.Second))
	req := limiter.Request{Group: "g", Rules: []rule.Rule{one}}
	if _, err := s.Reserve(ctx, req); err != nil {
		t.Fatal(err)
	}
	busy := keepBusy(admin, probe, 3*time.Second)
	for name, reserve := range map[string]func() (limiter.Reservation, error){
		"shared": func() (limiter.Reservation, error) { return s.Reserve(ctx, req) },
		"redis":  func() (limiter.Reservation, error) { return s.Redis().Reserve(ctx, req) },
	} {
		res, err := reserve()
		if err == nil && res.OK() {
			t.Errorf("%s: admitted by a Redis busy for three seconds: the Timeout did not bound the call", name)
		}
		if err != nil && !errors.Is(err, limiter.ErrUnavailable) {
			t.Errorf("%s: %v, want ErrUnavailable", name, err)
		}
	}
	if err := <-busy; err != nil {
		t.Fatal(err)
	}
}

// keepBusy runs a script that holds Redis for d through admin and returns
// once Redis is held, which probe finds by a PING that gets no answer in
// 150 ms (far longer than a loaded machine delays a PING; the script still
// has most of d to run). The channel receives the script's error when it
// ends.
func keepBusy(admin, probe *redis.Client, d time.Duration) <-chan error {
	ctx := context.Background()
	busy := make(chan error, 1)
	go func() {
		busy <- admin.Eval(ctx, `local t = redis.call('TIME') local e = t[1] * 1e6 + t[2] + tonumber(ARGV[1])
repeat t = redis.call('TIME') until t[1] * 1e6 + t[2] > e return 0`, nil, d.Microseconds()).Err()
	}()
	for {
		pctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
		err := probe.Do(pctx, "PING").Err()
		cancel()
		if err != nil {
			return busy
		}
	}
}

// sharedOnSocketDeadlines is a Shared limiter that refuses during an
// outage, on its own redis-server, through a client that applies context
// deadlines to its socket and never retries; admin and probe are two more
// clients of that server, for keepBusy.
func sharedOnSocketDeadlines(t *testing.T, prefix string, timeout time.Duration) (s *limiter.Shared, admin, probe *redis.Client) {
	t.Helper()
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	s = newShared(t, c, limiter.SharedConfig{Prefix: prefix, Mode: limiter.OutageRefuse, Timeout: timeout})
	return s, srv.Client(t), srv.Client(t)
}
