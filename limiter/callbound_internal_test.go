package limiter

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

type ctxKey struct{}

// A call is bounded by the Timeout, within a sixteenth of it, through a
// deadline shared by the calls that start close together; it keeps the
// caller's values, and a caller's earlier deadline is kept as it is.
func TestCallBound(t *testing.T) {
	var b callBound
	caller := context.WithValue(context.Background(), ctxKey{}, "span")

	const d = 40 * time.Millisecond
	before := time.Now()
	ctx, cancel := b.within(caller, d)
	after := time.Now()
	if cancel != nil {
		t.Fatal("a caller that cannot be cancelled got a timer of its own")
	}
	end, ok := ctx.Deadline()
	if !ok || end.Before(before.Add(d-d/16)) || end.After(after.Add(d)) {
		t.Fatalf("deadline %v after the call, want within [%v, %v]", end.Sub(before), d-d/16, d)
	}
	if v := ctx.Value(ctxKey{}); v != "span" {
		t.Errorf("the caller's value is %v, want it carried", v)
	}
	<-ctx.Done()
	if closed := time.Now(); closed.Before(end) {
		t.Errorf("done %v before its deadline", end.Sub(closed))
	}
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Errorf("Err %v, want DeadlineExceeded", ctx.Err())
	}

	// The caller's own deadline comes first: its context goes as it is.
	short, cancelShort := context.WithTimeout(caller, d/2)
	defer cancelShort()
	if got, cancel := b.within(short, d); got != short || cancel != nil {
		t.Errorf("a caller ending within the Timeout got another context")
	}

	// Calls starting within a sixteenth of the Timeout share one deadline
	// (one timer); a call later than that gets a later one.
	var long callBound
	first, _ := long.within(caller, time.Hour)
	second, _ := long.within(caller, time.Hour)
	if first.Done() != second.Done() {
		t.Error("two calls a moment apart got a timer each")
	}
	var short16 callBound
	a, _ := short16.within(caller, 16*time.Millisecond)
	time.Sleep(2 * time.Millisecond) // past a sixteenth of the Timeout
	c, _ := short16.within(caller, 16*time.Millisecond)
	ea, _ := a.Deadline()
	ec, _ := c.Deadline()
	if !ec.After(ea) {
		t.Errorf("a call 2 ms later kept the deadline of one 1 ms apart at most: %v, %v", ea, ec)
	}
}

// A caller that can be cancelled keeps its cancellation: go-redis gives up
// a call still waiting for a connection once its context is done, so the
// call gets a context of its own, done with the caller's.
func TestCallBoundKeepsTheCallersCancellation(t *testing.T) {
	var b callBound
	caller, cancelCaller := context.WithCancel(context.Background())
	ctx, cancel := b.within(caller, time.Hour)
	if cancel == nil {
		t.Fatal("no CancelFunc for a context of its own")
	}
	defer cancel()
	if end, ok := ctx.Deadline(); !ok || time.Until(end) > time.Hour {
		t.Fatalf("deadline %v, %v: want the Timeout's", end, ok)
	}
	cancelCaller()
	<-ctx.Done() // would block: the test's own timeout says so
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Errorf("Err %v, want the caller's Canceled", ctx.Err())
	}
}

// Callers racing to renew the shared deadline all get one that bounds
// them by the Timeout, and share few of them.
func TestCallBoundConcurrent(t *testing.T) {
	var b callBound
	const d = 8 * time.Millisecond
	const callers, calls = 16, 500
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		seen = map[<-chan struct{}]bool{}
	)
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := map[<-chan struct{}]bool{}
			for range calls {
				start := time.Now()
				ctx, _ := b.within(context.Background(), d)
				end, ok := ctx.Deadline()
				if !ok || end.Before(start.Add(d-d/16)) || end.After(time.Now().Add(d)) {
					t.Errorf("deadline %v after the call, want within [%v, %v]", end.Sub(start), d-d/16, d)
					return
				}
				mine[ctx.Done()] = true
			}
			mu.Lock()
			for k := range mine {
				seen[k] = true
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	// A deadline per call would be 8,000; one per half millisecond of the
	// run is far fewer, however slowly the machine runs it.
	if len(seen) > callers*calls/2 {
		t.Errorf("%d deadlines for %d calls: not shared", len(seen), callers*calls)
	}
}
