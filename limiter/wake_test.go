package limiter_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/quotaware/throttle/limiter"
)

// Many waiters at once, short and long waits mixed: none wakes before its
// instant.
func TestSleepNeverEarly(t *testing.T) {
	var wg sync.WaitGroup
	errs := make(chan error, 400)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 25 {
				d := time.Duration(rand.IntN(6000)) * time.Microsecond // across the timer and fine stretches
				at := time.Now().Add(d)
				if err := admitted(d, nil).Wait(context.Background()); err != nil {
					errs <- err
					return
				}
				if early := time.Until(at); early > 0 {
					errs <- errors.New("woke " + early.String() + " early")
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// admitted is a slot d ahead whose Cancel calls cancel.
func admitted(d time.Duration, cancel func(context.Context) error) *limiter.Reservation {
	r := limiter.Admit(time.Now(), d, -1, cancel, nil)
	return &r
}

// A wait cut short leaves the give-back to the caller; Cancel gives the
// slot back once; a refusal has nothing to wait for or give back.
func TestWaitCancelledThenCancel(t *testing.T) {
	var given int
	giveBack := func(ctx context.Context) error {
		given++
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := admitted(time.Hour, giveBack)
	if err := r.Wait(ctx); !errors.Is(err, context.Canceled) || given != 0 {
		t.Fatalf("Wait: %v, given back %d times, want context.Canceled and nothing given back", err, given)
	}
	for range 2 {
		if err := r.Cancel(context.Background()); err != nil || given != 1 {
			t.Errorf("Cancel: given back %d times (%v), want once", given, err)
		}
	}
	refused := limiter.Refuse(time.Now(), time.Second, 0, nil)
	if err := refused.Wait(ctx); err != nil || refused.Cancel(ctx) != nil || given != 1 {
		t.Errorf("a refusal: Wait %v, given back %d times, want nothing to do", err, given)
	}
}

// A slot at or past the context's deadline fails Wait at once, as
// x/time/rate's Wait does, with an error matching DeadlineExceeded; the
// slot is not given back by Wait. A slot before the deadline is waited for.
func TestWaitPastTheDeadlineFailsAtOnce(t *testing.T) {
	var given int
	giveBack := func(context.Context) error { given++; return nil }
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, d := range []time.Duration{time.Hour, time.Minute} {
		err := admitted(d, giveBack).Wait(ctx)
		if !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
			t.Errorf("a slot %v away, the deadline a minute away: %v (context %v), want a deadline error at once", d, err, ctx.Err())
		}
	}
	if given != 0 {
		t.Errorf("given back %d times, want none", given)
	}
	if err := admitted(time.Millisecond, nil).Wait(ctx); err != nil {
		t.Errorf("a slot before the deadline: %v", err)
	}
}

// A cancelled context ends the wait with its cause, in either stretch.
func TestSleepCancelled(t *testing.T) {
	cause := errors.New("caller left")
	for _, d := range []time.Duration{time.Hour, time.Millisecond} {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(cause)
		if err := admitted(d, nil).Wait(ctx); !errors.Is(err, cause) {
			t.Errorf("wait %v with a cancelled context: %v, want its cause", d, err)
		}
	}
	if err := admitted(-time.Second, nil).Wait(context.Background()); err != nil {
		t.Errorf("a wait already over: %v, want nil at once", err)
	}
}

// How late a wake comes, against a plain timer; reported, not asserted.
//
//	go test -run '^$' -bench Lateness ./limiter/
func BenchmarkLateness(b *testing.B) {
	for _, tc := range []struct {
		name  string
		sleep func(time.Duration)
	}{
		{"timer", func(d time.Duration) { <-time.NewTimer(d).C }},
		{"Reservation.Sleep", func(d time.Duration) { _ = admitted(d, nil).Wait(context.Background()) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var late []time.Duration
			for b.Loop() {
				d := time.Duration(3000+rand.IntN(2000)) * time.Microsecond
				at := time.Now().Add(d)
				tc.sleep(d)
				late = append(late, time.Since(at))
			}
			slices.Sort(late)
			b.ReportMetric(float64(late[len(late)/2].Microseconds()), "p50-late-µs")
			b.ReportMetric(float64(late[len(late)*99/100].Microseconds()), "p99-late-µs")
		})
	}
}
