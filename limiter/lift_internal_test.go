package limiter

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/quotaware/throttle/internal/redistest"
)

// A lift heard from the channel drops the copy of a penalty kept for
// outages, not one still waiting to be written to Redis: no operator saw
// that one in Redis to lift it, and a spoofed lift used to drop it for
// good (it never reached Redis, so no other replica learned of it).
func TestHeardLiftKeepsPenaltyWaitingToBeWritten(t *testing.T) {
	srv := redistest.Start(t)
	s, err := NewShared(srv.Client(t), SharedConfig{Prefix: "heardlift", Share: 1, Probe: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	srv.Stop()
	ctx := context.Background()
	// Redis away: the penalty is kept to be written (the first call
	// also says Redis failed).
	if err := s.Penalize(ctx, "g", Penalty{Scope: "app", Until: time.Now().Add(time.Hour), Code: "88"}); err != nil && !errors.Is(err, ErrUnavailable) {
		t.Fatal(err)
	}
	s.failover.penMu.Lock()
	_, kept := s.failover.penalties[penaltyID{"g", "app"}]
	s.failover.penMu.Unlock()
	if !kept {
		t.Fatal("the penalty was not kept to be written")
	}
	s.watcher.cfg.onLift("g", "app")
	s.failover.penMu.Lock()
	_, kept = s.failover.penalties[penaltyID{"g", "app"}]
	s.failover.penMu.Unlock()
	if !kept {
		t.Fatal("a lift heard from the channel dropped the penalty waiting to be written")
	}
}

// gatedPenalize passes each Penalize to the real store only when the test
// lets it, so that a test can act while a write is in flight.
type gatedPenalize struct {
	store
	entered  chan struct{}
	letGo    chan struct{}
	open     chan struct{} // closed: every write passes (the test ended)
	openOnce *sync.Once
}

func newGate(s store) gatedPenalize {
	return gatedPenalize{store: s, entered: make(chan struct{}), letGo: make(chan struct{}), open: make(chan struct{}), openOnce: new(sync.Once)}
}

// openAll lets every write through from now on; it may be called again.
func (g gatedPenalize) openAll() { g.openOnce.Do(func() { close(g.open) }) }

func (g gatedPenalize) Penalize(ctx context.Context, group string, p Penalty) error {
	select {
	case g.entered <- struct{}{}:
		select {
		case <-g.letGo:
		case <-g.open:
		}
	case <-g.open:
	}
	return g.store.Penalize(ctx, group, p)
}

// A penalty kept during an outage stays kept while its write is in flight,
// and a lift meanwhile drops it for good: the write used to take the
// penalties out of the queue and put back the ones Redis did not take, so
// a lift during the write found nothing and the lifted penalty came back.
func TestLiftDuringAKeptPenaltyWriteSticks(t *testing.T) {
	srv := redistest.Start(t)
	r, err := newRedis(srv.Client(t), withPrefix("liftwrite"))
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	gate := newGate(r)
	f := newFailover(gate, failoverConfig{Probe: time.Hour, Recover: -1})
	defer f.close()
	defer gate.openAll()
	ctx := context.Background()
	done := make(chan error, 1)
	go func() {
		done <- f.Penalize(ctx, "g", Penalty{Scope: "app", Until: time.Now().Add(time.Hour), Code: "88"})
	}()
	<-gate.entered // the caller's own write
	gate.letGo <- struct{}{}
	if err := <-done; !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Penalize with Redis away: %v, want ErrUnavailable", err)
	}
	<-gate.entered // the background write of the kept penalty, in flight
	f.penMu.Lock()
	_, kept := f.penalties[penaltyID{"g", "app"}]
	f.penMu.Unlock()
	if !kept {
		t.Fatal("the penalty was not kept while its write was in flight")
	}
	if _, err := f.LiftPenalty(ctx, "g", "app"); err != nil && !errors.Is(err, ErrUnavailable) {
		t.Fatal(err)
	}
	gate.letGo <- struct{}{} // the write fails: Redis is away
	f.close()
	f.penMu.Lock()
	_, kept = f.penalties[penaltyID{"g", "app"}]
	f.penMu.Unlock()
	if kept {
		t.Fatal("the lifted penalty is kept to be written again")
	}
}

// callerKey marks the contexts of the test's own Penalize calls.
type callerKey struct{}

// refuseCallers is gatedPenalize whose store answers the test's own
// Penalize calls as a Redis that is away would, and the background
// writes of the kept penalties for real, one at a time as let go.
type refuseCallers struct {
	gatedPenalize
	writing chan penaltyID // the kept penalty each write is of
}

func (g refuseCallers) Penalize(ctx context.Context, group string, p Penalty) error {
	if ctx.Value(callerKey{}) != nil {
		return fmt.Errorf("%w: refused for the test", ErrUnavailable)
	}
	select {
	case g.writing <- penaltyID{group, p.Scope}:
	case <-g.open:
	}
	return g.gatedPenalize.Penalize(ctx, group, p)
}

// A penalty kept during an outage and lifted while another kept penalty
// is being written is not written after it: each write checks that its
// penalty is still kept (the round wrote every penalty it had read at its
// start).
func TestLiftDuringAnotherKeptWriteSticks(t *testing.T) {
	srv := redistest.Start(t)
	r, err := newRedis(srv.Client(t), withPrefix("liftother"))
	if err != nil {
		t.Fatal(err)
	}
	gate := refuseCallers{gatedPenalize: newGate(r), writing: make(chan penaltyID)}
	f := newFailover(gate, failoverConfig{Probe: time.Hour, Recover: -1})
	defer f.close()
	defer gate.openAll()
	ctx := context.WithValue(context.Background(), callerKey{}, true)
	until := time.Now().Add(time.Hour)
	// Two kept; the round's first write waits at the gate (the round may
	// have read the queue before the second was kept: then the lift takes
	// it from the next round's queue, which never failed).
	for _, scope := range []string{"a", "b"} {
		if err := f.Penalize(ctx, "g", Penalty{Scope: scope, Until: until, Code: "88"}); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Penalize %s: %v, want ErrUnavailable", scope, err)
		}
	}
	first := <-gate.writing
	<-gate.entered
	other := penaltyID{"g", "a"}
	if first.scope == "a" {
		other = penaltyID{"g", "b"}
	}
	if _, err := f.LiftPenalty(context.Background(), other.group, other.scope); err != nil {
		t.Fatal(err)
	}
	gate.letGo <- struct{}{} // the first write goes to Redis
	gate.openAll()           // and any other passes at once
	f.close()
	check := srv.Client(t)
	if n := check.Exists(context.Background(), r.penaltyKey(first.group, first.scope)).Val(); n != 1 {
		t.Fatalf("the kept penalty %q was not written", first.scope)
	}
	if n := check.Exists(context.Background(), r.penaltyKey(other.group, other.scope)).Val(); n != 0 {
		t.Fatalf("the penalty %q lifted during another's write was written after its lift", other.scope)
	}
}
