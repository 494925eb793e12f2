package limiter_test

import (
	"context"
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
	var last limiter.Reservation
	for i := 0; i < 5; i++ {
		res, err := f.Reserve(ctx, req)
		if err != nil || !res.OK() || res.Local() {
			t.Fatalf("on the primary: %+v %v", res, err)
		}
		last = res
	}
	primary.down.Store(true)
	first, err := f.Reserve(ctx, req)
	if err != nil || !first.OK() || !first.Local() {
		t.Fatalf("after the primary failed: %+v %v, want a local slot", first, err)
	}
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
	var last limiter.Reservation
	for i := 0; i < 4; i++ { // the whole window at once, on the primary
		res, err := f.Reserve(ctx, req)
		if err != nil || !res.OK() || res.Local() || res.Delay() != 0 {
			t.Fatalf("burst on the primary: %+v %v", res, err)
		}
		last = res
	}
	primary.down.Store(true)
	local, err := f.Reserve(ctx, req)
	if err != nil || !local.OK() || !local.Local() {
		t.Fatalf("after the primary failed: %+v %v, want a local slot", local, err)
	}
	if local.SendAt().Before(last.SendAt().Add(window.Period())) {
		t.Fatalf("local slot at %v, within the window of the primary's burst ending %v", local.SendAt(), last.SendAt())
	}
	// A window rule the primary did not book recently is not held.
	free, err := f.Reserve(ctx, limiter.Request{Group: "g", Rules: []rule.Rule{other}, MaxWait: time.Second})
	if err != nil || !free.OK() || free.Delay() > 0 {
		t.Fatalf("another window rule: %+v %v, want a local slot at once", free, err)
	}
}
