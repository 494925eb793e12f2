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
	ctx := b.within(caller, d)
	after := time.Now()
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
	short, cancel := context.WithTimeout(caller, d/2)
	defer cancel()
	if got := b.within(short, d); got != short {
		t.Errorf("a caller ending within the Timeout got another context")
	}

	// Calls starting within a sixteenth of the Timeout share one deadline
	// (one timer); a call later than that gets a later one.
	var long callBound
	first, second := long.within(caller, time.Hour), long.within(caller, time.Hour)
	if first.Done() != second.Done() {
		t.Error("two calls a moment apart got a timer each")
	}
	var short16 callBound
	a := short16.within(caller, 16*time.Millisecond)
	time.Sleep(2 * time.Millisecond) // past a sixteenth of the Timeout
	c := short16.within(caller, 16*time.Millisecond)
	ea, _ := a.Deadline()
	ec, _ := c.Deadline()
	if !ec.After(ea) {
		t.Errorf("a call 2 ms later kept the deadline of one 1 ms apart at most: %v, %v", ea, ec)
	}
}

// Callers racing to renew the shared deadline all get one that bounds
// them by the Timeout.
func TestCallBoundConcurrent(t *testing.T) {
	var b callBound
	const d = 8 * time.Millisecond
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 500 {
				start := time.Now()
				ctx := b.within(context.Background(), d)
				end, ok := ctx.Deadline()
				if !ok || end.Before(start.Add(d-d/16)) {
					t.Errorf("deadline %v after the call, want at least %v", end.Sub(start), d-d/16)
					return
				}
			}
		}()
	}
	wg.Wait()
}
