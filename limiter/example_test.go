package limiter_test

import (
	"context"
	"fmt"
	"time"

	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/rule"
)

// A rule of at most 2 requests in any second, 2 of them back to back, kept
// by the in-memory limiter: two go now, the third is booked a second ahead
// (never 3 in one second), and a fourth that may not wait is refused, with
// how long until a request could go at once. (Durations are rounded to
// 100ms: the calls themselves take a little time.)
func ExampleNewMemory() {
	rl, err := rule.New("api:app1:/v1/users", 2, time.Second, rule.WithBurst(2))
	if err != nil {
		panic(err)
	}
	l := limiter.NewMemory()
	ctx := context.Background()

	for i, maxWait := range []time.Duration{time.Second, time.Second, time.Second, 0} {
		res, err := l.Reserve(ctx, limiter.Request{Group: "example", Rules: []rule.Rule{rl}, MaxWait: maxWait})
		if err != nil {
			panic(err)
		}
		if res.OK() {
			fmt.Printf("request %d: send in %v\n", i+1, res.Delay().Round(100*time.Millisecond))
		} else {
			fmt.Printf("request %d: refused, retry in %v\n", i+1, res.RetryAfter().Round(100*time.Millisecond))
		}
	}
	// Output:
	// request 1: send in 0s
	// request 2: send in 0s
	// request 3: send in 1s
	// request 4: refused, retry in 2s
}

// The pattern for a caller that waits: Wait until the slot, and when the
// caller gives up first, Cancel so the next request gets the slot.
func ExampleReservation_Cancel() {
	rl := rule.Must(rule.New("api:app1:/v1/users", 1, time.Second))
	l := limiter.NewMemory()
	req := limiter.Request{Group: "example", Rules: []rule.Rule{rl}, MaxWait: 5 * time.Second}
	ctx := context.Background()

	first, _ := l.Reserve(ctx, req)
	fmt.Println("first: send in", first.Delay().Round(100*time.Millisecond))

	second, _ := l.Reserve(ctx, req)
	gaveUp, cancel := context.WithCancel(ctx)
	cancel() // the caller's deadline passes during the wait
	if err := second.Wait(gaveUp); err != nil {
		fmt.Println("second: wait ended:", err)
		_ = second.Cancel(ctx)
	}

	third, _ := l.Reserve(ctx, req)
	fmt.Println("third: send in", third.Delay().Round(100*time.Millisecond), "(the slot the second gave back)")
	// Output:
	// first: send in 0s
	// second: wait ended: context canceled
	// third: send in 1s (the slot the second gave back)
}
