package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/rule"
)

// flaky is a primary limiter that answers from a Memory until told to fail.
type flaky struct {
	*limiter.Memory
	down atomic.Bool
}

func (f *flaky) Reserve(ctx context.Context, req limiter.Request) (limiter.Reservation, error) {
	if f.down.Load() {
		return limiter.Reservation{}, limiter.ErrUnavailable
	}
	return f.Memory.Reserve(ctx, req)
}

// When the primary goes away, local slots start a period after the last slot
// the primary booked, so no window of the rule holds both;
// the local rule is the replica's share; the primary is used again once a
// probe finds it back.
func TestFailoverTakesOverAfterBookedSlots(t *testing.T) {
	primary := &flaky{Memory: limiter.NewMemory()}
	var switches []bool
	f := limiter.NewFailover(primary, limiter.FailoverConfig{
		Share: func() float64 { return 0.5 }, Probe: 10 * time.Millisecond,
		OnSwitch: func(down bool, err error) { switches = append(switches, down) },
	})
	ctx := context.Background()
	rl := rule.Must(rule.New("r", 10, time.Second)) // T = 100ms; the share: 5/s, T = 200ms
	req := limiter.Request{Group: "g", Rules: []rule.Rule{rl}, MaxWait: 3 * time.Second}
	booked := onPrimary(t, f, req, 5)
	last := booked[len(booked)-1]
	primary.down.Store(true)
	first := localSlot(t, f, req)
	if first.SendAt().Before(last.SendAt().Add(rl.Period())) {
		t.Fatalf("local slot at %v, within a period of the primary's last booked slot %v", first.SendAt(), last.SendAt())
	}
	second, _ := f.Reserve(ctx, req)
	if got := second.SendAt().Sub(first.SendAt()); got != 200*time.Millisecond {
		t.Fatalf("local slots %v apart, want the half share's 200ms", got)
	}
	primary.down.Store(false)
	deadline := time.Now().Add(2 * time.Second)
	for {
		res, err := f.Reserve(ctx, req)
		if err == nil && !res.Local() {
			// Back on the primary, the first slot waits one period past the
			// last local one, so no window holds both.
			if res.SendAt().Before(second.SendAt().Add(rl.Period())) {
				t.Fatalf("first slot on the primary at %v, within a period of the last local one %v", res.SendAt(), second.SendAt())
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("never went back to the primary")
		}
		time.Sleep(5 * time.Millisecond) // the probe interval is the behaviour under test
	}
	if len(switches) != 2 || !switches[0] || switches[1] {
		t.Fatalf("switches %v, want down then up, once each", switches)
	}
	if f.Down() {
		t.Fatal("still down")
	}
}

// A window rule's local share may go in one burst, so it starts only one
// period after the last slot the primary booked for the rule: a minute's
// burst on the primary and the local shares' bursts never meet in one
// window, however long the rule's period (a paced rule's hold is capped).
func TestFailoverHoldsWindowRulesForTheirPeriod(t *testing.T) {
	primary := &flaky{Memory: limiter.NewMemory()}
	f := limiter.NewFailover(primary, limiter.FailoverConfig{Share: func() float64 { return 0.5 }, Probe: time.Hour})
	ctx := context.Background()
	window := rule.Must(rule.NewWindow("robot", 4, 10*time.Second))
	other := rule.Must(rule.NewWindow("other", 4, 10*time.Second))
	req := limiter.Request{Group: "g", Rules: []rule.Rule{window}, MaxWait: 20 * time.Second}
	// The whole window at once, on the primary.
	booked := onPrimary(t, f, req, 4)
	last := booked[len(booked)-1]
	for _, res := range booked {
		if res.Delay() != 0 {
			t.Fatalf("burst on the primary: %+v, want no wait", res)
		}
	}
	primary.down.Store(true)
	local := localSlot(t, f, req)
	if local.SendAt().Before(last.SendAt().Add(window.Period())) {
		t.Fatalf("local slot at %v, within the window of the primary's burst ending %v", local.SendAt(), last.SendAt())
	}
	// A window rule the primary did not book recently is not held.
	free, err := f.Reserve(ctx, limiter.Request{Group: "g", Rules: []rule.Rule{other}, MaxWait: time.Second})
	if err != nil || !free.OK() || free.Delay() > 0 {
		t.Fatalf("another window rule: %+v %v, want a local slot at once", free, err)
	}
}

// slowBatch is a primary whose call for group "batch" books n slots (a
// coalesced batch) and answers only once let go; its other calls fail
// once down is set.
type slowBatch struct {
	*limiter.Memory
	n       int
	entered chan struct{}
	release chan struct{}
	down    atomic.Bool
}

func (s *slowBatch) Reserve(ctx context.Context, req limiter.Request) (limiter.Reservation, error) {
	if req.Group == "batch" {
		var res limiter.Reservation
		var err error
		for range s.n {
			res, err = s.Memory.Reserve(ctx, req)
		}
		s.entered <- struct{}{}
		<-s.release
		return res, err
	}
	if s.down.Load() {
		return limiter.Reservation{}, limiter.ErrUnavailable
	}
	return s.Memory.Reserve(ctx, req)
}

// A reply that arrives after the switch to local limits, to a call made
// before it (a batch in flight while another call timed out), holds the
// local slots back past what it booked, as the slots known at the switch
// do. The hold used to be fixed at the switch.
func TestFailoverLateReplyHoldsLocalSlots(t *testing.T) {
	primary := &slowBatch{Memory: limiter.NewMemory(), n: 15, entered: make(chan struct{}), release: make(chan struct{})}
	f := limiter.NewFailover(primary, limiter.FailoverConfig{Share: func() float64 { return 1 }, Probe: time.Hour})
	ctx := context.Background()
	rl := rule.Must(rule.New("r", 10, time.Second)) // T = 100ms
	req := limiter.Request{Group: "batch", Rules: []rule.Rule{rl}, MaxWait: 5 * time.Second}
	late := make(chan limiter.Reservation, 1)
	go func() {
		res, _ := f.Reserve(ctx, req)
		late <- res
	}()
	<-primary.entered
	primary.down.Store(true)
	other := limiter.Request{Group: "other", Rules: []rule.Rule{rule.Must(rule.New("q", 10, time.Second))}}
	if res, _ := f.Reserve(ctx, other); !res.Local() {
		t.Fatal("the failed call did not switch to local limits")
	}
	close(primary.release)
	inFlight := <-late
	if !inFlight.OK() || inFlight.Local() {
		t.Fatalf("the batch in flight: %+v, want the primary's slot", inFlight)
	}
	local, err := f.Reserve(ctx, limiter.Request{Group: "batch", Rules: []rule.Rule{rl}, MaxWait: 5 * time.Second})
	if err != nil || !local.OK() || !local.Local() {
		t.Fatalf("after the switch: %+v %v, want a local slot", local, err)
	}
	if want := inFlight.SendAt().Add(rl.Period()); local.SendAt().Before(want) {
		t.Fatalf("local slot %v after the batch's last slot, want at least a period (%v)", local.SendAt().Sub(inFlight.SendAt()), rl.Period())
	}
}

// A window rule of a second (no longer than the 2 s hold) is held at a
// switch as a paced rule is: its local share, which may go in one burst,
// starts a window after the primary's last send, and the primary's first
// sends after coming back start a window after the last local one. It was
// not held either way: a replica sent Redis's 4 and its local 2 in one
// second of a limit of 4.
func TestFailoverHoldsShortWindowRules(t *testing.T) {
	primary := &flaky{Memory: limiter.NewMemory()}
	f := limiter.NewFailover(primary, limiter.FailoverConfig{Share: func() float64 { return 0.5 }, Probe: time.Nanosecond})
	ctx := context.Background()
	w := rule.Must(rule.NewWindow("w", 4, time.Second))
	req := limiter.Request{Group: "g", Rules: []rule.Rule{w}, MaxWait: 10 * time.Second}
	booked := onPrimary(t, f, req, 4)
	last := booked[len(booked)-1]
	primary.down.Store(true)
	var lastLocal limiter.Reservation
	for range 2 {
		res := localSlot(t, f, req)
		if res.SendAt().Before(last.SendAt().Add(w.Period())) {
			t.Fatalf("local send %v after the primary's last, within its window of %v", res.SendAt().Sub(last.SendAt()), w.Period())
		}
		lastLocal = res
	}
	primary.down.Store(false)
	for range 100 {
		res, err := f.Reserve(ctx, req)
		if err != nil || !res.OK() {
			t.Fatalf("%+v %v", res, err)
		}
		if res.Local() {
			lastLocal = res
			continue
		}
		if res.SendAt().Before(lastLocal.SendAt().Add(w.Period())) {
			t.Fatalf("the primary's first send %v after the last local one, within its window of %v", res.SendAt().Sub(lastLocal.SendAt()), w.Period())
		}
		return
	}
	t.Fatal("never back on the primary")
}

// skewed is a primary whose clock runs by behind this replica's: its
// answers' times are on that clock, its slots the Memory limiter's.
type skewed struct {
	*limiter.Memory
	by   time.Duration
	down atomic.Bool
}

func (s *skewed) Reserve(ctx context.Context, req limiter.Request) (limiter.Reservation, error) {
	if s.down.Load() {
		return limiter.Reservation{}, limiter.ErrUnavailable
	}
	res, err := s.Memory.Reserve(ctx, req)
	if err != nil || !res.OK() {
		return res, err
	}
	return limiter.Admit(res.SendAt().Add(-s.by-res.Delay()), res.Delay(), res.Rule(), res.Cancel, res.Release), nil
}

// The primary's answers are on its clock, the local slots on this
// replica's: a primary 3 s behind made its last slot look 3 s old, and
// the local share started at once, on top of it. The hold is kept on this
// replica's clock.
func TestFailoverHoldAcrossClockSkew(t *testing.T) {
	const behind = 3 * time.Second
	primary := &skewed{Memory: limiter.NewMemory(), by: behind}
	f := limiter.NewFailover(primary, limiter.FailoverConfig{Share: func() float64 { return 1 }, Probe: time.Hour})
	rl := rule.Must(rule.New("r", 10, time.Second)) // T = 100ms
	req := limiter.Request{Group: "g", Rules: []rule.Rule{rl}, MaxWait: 10 * time.Second}
	booked := onPrimary(t, f, req, 5)
	last := booked[len(booked)-1]
	primary.down.Store(true)
	local := localSlot(t, f, req)
	// The primary's last slot on this replica's clock; holds are kept in
	// whole microseconds.
	lastHere := last.SendAt().Add(behind)
	if want := lastHere.Add(rl.Period() - time.Microsecond); local.SendAt().Before(want) {
		t.Fatalf("local slot %v after the primary's last (on this replica's clock), want at least a period (%v)", local.SendAt().Sub(lastHere), rl.Period())
	}
}

// A local slot goes back with the share it was booked at: the live
// replicas may change between the reservation and its cancel. It was given
// back at the share then in force, twice its interval here, and the next
// slot landed on the one before it.
func TestFailoverCancelsAtTheShareBooked(t *testing.T) {
	primary := &flaky{Memory: limiter.NewMemory()}
	primary.down.Store(true)
	var share atomic.Int64 // in percent
	share.Store(50)
	f := limiter.NewFailover(primary, limiter.FailoverConfig{Share: func() float64 { return float64(share.Load()) / 100 }, Probe: time.Hour})
	ctx := context.Background()
	rl := rule.Must(rule.New("r", 10, time.Minute)) // T = 6 s; the half share: 12 s
	req := limiter.Request{Group: "g", Rules: []rule.Rule{rl}, MaxWait: time.Hour}
	a, err := f.Reserve(ctx, req)
	if err != nil || !a.OK() || !a.Local() {
		t.Fatalf("first: %+v %v, want a local slot", a, err)
	}
	b, err := f.Reserve(ctx, req)
	if err != nil || !b.OK() {
		t.Fatalf("second: %+v %v", b, err)
	}
	share.Store(25) // another replica joined
	if err := b.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
	share.Store(50)
	c, err := f.Reserve(ctx, req)
	if err != nil || !c.OK() {
		t.Fatalf("third: %+v %v", c, err)
	}
	if !c.SendAt().Equal(b.SendAt()) {
		t.Fatalf("after giving back the second slot (%v after the first), the next came %v after the first, want the same slot", b.SendAt().Sub(a.SendAt()), c.SendAt().Sub(a.SendAt()))
	}
}

// onPrimary reserves n slots of req on f, each of which must be the
// primary's.
func onPrimary(t *testing.T, f *limiter.Failover, req limiter.Request, n int) []limiter.Reservation {
	t.Helper()
	var booked []limiter.Reservation
	for range n {
		res, err := f.Reserve(context.Background(), req)
		if err != nil || !res.OK() || res.Local() {
			t.Fatalf("on the primary: %+v %v", res, err)
		}
		booked = append(booked, res)
	}
	return booked
}

// localSlot reserves one slot of req on f, which must be a local one.
func localSlot(t *testing.T, f *limiter.Failover, req limiter.Request) limiter.Reservation {
	t.Helper()
	res, err := f.Reserve(context.Background(), req)
	if err != nil || !res.OK() || !res.Local() {
		t.Fatalf("after the primary failed: %+v %v, want a local slot", res, err)
	}
	return res
}

// twoErrors fails with errors of two different types, as a Redis limiter
// does (a dial error wrapped, then a malformed reply).
type twoErrors struct {
	*limiter.Memory
	n atomic.Int32
}

func (f *twoErrors) Reserve(ctx context.Context, req limiter.Request) (limiter.Reservation, error) {
	if f.n.Add(1)%2 == 1 {
		return limiter.Reservation{}, fmt.Errorf("%w: redis reserve: %w", limiter.ErrUnavailable, errors.New("dial tcp: connection refused"))
	}
	return limiter.Reservation{}, fmt.Errorf("%w: reserve: malformed reply %q", limiter.ErrUnavailable, "x")
}

// The primary's failures of different types are each kept for the
// refusals' text (an atomic.Value holding them panicked at the second).
func TestFailoverKeepsFailuresOfAnyType(t *testing.T) {
	f := limiter.NewFailover(&twoErrors{Memory: limiter.NewMemory()}, limiter.FailoverConfig{
		Mode: limiter.OutageRefuse, Share: func() float64 { return 1 }, Probe: time.Nanosecond})
	req := limiter.Request{Group: "g", Rules: []rule.Rule{rule.Must(rule.New("r", 10, time.Second))}, MaxWait: time.Second}
	var last error
	for range 4 {
		_, last = f.Reserve(context.Background(), req)
		if !errors.Is(last, limiter.ErrUnavailable) {
			t.Fatalf("%v, want ErrUnavailable", last)
		}
	}
	if !strings.Contains(last.Error(), "malformed reply") && !strings.Contains(last.Error(), "connection refused") {
		t.Fatalf("%v: names neither failure", last)
	}
}

// timedOut fails as the Redis limiter does when the failover's own Timeout
// ends its call: with the bare context error, which the failover wraps.
type timedOut struct{ *limiter.Memory }

func (timedOut) Reserve(context.Context, limiter.Request) (limiter.Reservation, error) {
	return limiter.Reservation{}, context.DeadlineExceeded
}

// Requests refused during an outage read the kept failure while others
// keep it (run with -race): the kept failure is a copy no one writes again.
func TestFailoverKeptFailureReadWhileKept(t *testing.T) {
	f := limiter.NewFailover(timedOut{limiter.NewMemory()}, limiter.FailoverConfig{
		Mode: limiter.OutageRefuse, Share: func() float64 { return 1 }, Probe: time.Microsecond})
	req := limiter.Request{Group: "g", Rules: []rule.Rule{rule.Must(rule.New("r", 10, time.Second))}, MaxWait: time.Second}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 500 {
				if _, err := f.Reserve(context.Background(), req); !errors.Is(err, limiter.ErrUnavailable) {
					t.Errorf("%v, want ErrUnavailable", err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// stalled is a primary limiter that answers from a Memory until told to
// stall, and then answers nothing until its call's bound passes, as a
// Redis that stopped answering does.
type stalled struct {
	*limiter.Memory
	stall atomic.Bool
}

func (s *stalled) Reserve(ctx context.Context, req limiter.Request) (limiter.Reservation, error) {
	if s.stall.Load() {
		<-ctx.Done()
		return limiter.Reservation{}, fmt.Errorf("%w: %w", limiter.ErrUnavailable, ctx.Err())
	}
	return s.Memory.Reserve(ctx, req)
}

// A local slot booked after a primary call that took its whole timeout
// fits what is left of the request's wait, not the whole of it: a caller
// with 1.6 s to wait, 0.5 s of it spent on the stalled call, is refused a
// slot 1.5 s away rather than sent past its budget.
func TestFailoverLocalSlotFitsTheWaitLeft(t *testing.T) {
	primary := &stalled{Memory: limiter.NewMemory()}
	f := limiter.NewFailover(primary, limiter.FailoverConfig{
		Share: func() float64 { return 1 }, Timeout: 500 * time.Millisecond, Probe: time.Hour,
	})
	t.Cleanup(func() { f.Close() })
	rl := rule.Must(rule.New("r", 1, 2*time.Second))
	req := limiter.Request{Group: "g", Rules: []rule.Rule{rl}, MaxWait: 1600 * time.Millisecond}
	onPrimary(t, f, req, 1)
	primary.stall.Store(true)
	began := time.Now()
	res, err := f.Reserve(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if res.OK() {
		t.Fatalf("a local slot %v after the call began, past the 1.6 s the caller had", res.SendAt().Sub(began))
	}
	if !res.Local() {
		t.Fatalf("refused by %+v, want the local fallback", res)
	}
}
