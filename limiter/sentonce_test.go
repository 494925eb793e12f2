package limiter_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle/internal/faultproxy"
	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/limitertest"
	"github.com/quotaware/throttle/limiter/rule"
)

// go-redis sends a command again when its connection fails before the reply
// (MaxRetries, 3 by default), though Redis may have run it. Here Redis runs
// a give-back whose reply is then lost to a reset connection: sent again
// (before), it returned a second slot of a calendar rule, and a day's quota
// of 2 let 3 requests through. Sent once, the give-back fails and the rule
// counts what was booked.
func TestGiveBackIsSentOnce(t *testing.T) {
	srv := redistest.Shared(t)
	proxy := faultproxy.Start(t, srv.Addr)
	// The client's own retries, as most users leave them.
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	prefix := limitertest.Group(t)
	cfg := limiter.SharedConfig{Prefix: prefix, Mode: limiter.OutageRefuse, NoCoalescing: true, Timeout: 10 * time.Second}
	l := limiter.MustNewShared(rdb, cfg)
	t.Cleanup(func() { l.Close() })
	// What Redis holds, read beside the proxy.
	reader := limiter.MustNewShared(srv.Client(t), cfg)
	t.Cleanup(func() { reader.Close() })

	ctx := context.Background()
	day := rule.Must(rule.NewCalendar("day", 2, rule.Day, time.UTC))
	req := limiter.Request{Group: "g", Rules: []rule.Rule{day}}
	used := func() int64 {
		t.Helper()
		n, err := reader.CalendarUsed(ctx, req.Group, req.Rules)
		if err != nil {
			t.Fatal(err)
		}
		return n[0]
	}
	var last limiter.Reservation
	var err error
	for range 2 {
		if last, err = l.Reserve(ctx, req); err != nil || !last.OK() {
			t.Fatalf("reserve: %+v %v", last, err)
		}
	}
	if n := used(); n != 2 {
		t.Fatalf("%d of the day used after two reservations, want 2", n)
	}

	// The give-back's script, loaded so that its call is one EVALSHA,
	// whose SHA marks the connection to fail.
	src, err := os.ReadFile("cancel.lua")
	if err != nil {
		t.Fatal(err)
	}
	sha, err := srv.Client(t).ScriptLoad(ctx, string(src)).Result()
	if err != nil {
		t.Fatal(err)
	}
	proxy.HoldRepliesAfter([]byte(sha))
	done := make(chan error, 1)
	go func() { done <- last.Cancel(ctx) }()
	// Redis has run the give-back once the count drops; its reply is held.
	for used() != 1 {
		select {
		case err := <-done:
			t.Fatalf("the give-back ended before Redis ran it: %v", err)
		case <-time.After(time.Millisecond):
		}
	}
	proxy.ResetAll()
	proxy.Resume()
	err = <-done
	if n := used(); n != 1 {
		t.Fatalf("%d of the day used after one give-back whose reply was lost, want 1 (the give-back ran twice)", n)
	}
	if err == nil {
		t.Fatal("the give-back reported success: its reply was lost, so it was sent again")
	}
	t.Logf("the give-back whose reply was lost: %v", err)
}
