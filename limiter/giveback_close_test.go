package limiter_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle/internal/faultproxy"
	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/limitertest"
	"github.com/quotaware/throttle/limiter/rule"
)

// A request whose caller gave up while its coalesced call was in flight
// has its slot given back aside, on a goroutine no caller waits for. Close
// waits for it: before, Close returned while the give-back still called
// Redis, so a service that closed the limiter and then its Redis client
// lost the slot, and the call ran past the end of the limiter's life.
func TestCloseWaitsForAGiveBack(t *testing.T) {
	srv := redistest.Shared(t)
	proxy := faultproxy.Start(t, srv.Addr)
	t.Cleanup(proxy.Resume)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	prefix := limitertest.Group(t)
	cfg := limiter.SharedConfig{Prefix: prefix, Mode: limiter.OutageRefuse, Timeout: 10 * time.Second}
	l := limiter.MustNewShared(rdb, cfg)
	t.Cleanup(func() { l.Close() })

	// The rule's key marks the calls whose replies the proxy holds: each
	// reserve's and the give-back's carry it. Two slots: the first
	// request's and the one given back.
	key := "giveback-" + prefix
	group := "g-" + prefix
	req := limiter.Request{Group: group, Rules: []rule.Rule{rule.Must(rule.New(key, 2, time.Hour, rule.WithBurst(2)))}}
	holding := func(what string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); proxy.Holding() == 0; {
			if time.Now().After(deadline) {
				t.Fatalf("%s never reached Redis in 10s", what)
			}
			time.Sleep(5 * time.Millisecond) // polls the proxy's state
		}
	}
	queued := make(chan struct{}, 1)
	limiter.SetOnQueued(func(g string) {
		if g == group {
			queued <- struct{}{}
		}
	})
	t.Cleanup(func() { limiter.SetOnQueued(nil) })

	// The scripts loaded first: a NOSCRIPT answer would make a held call
	// two round trips.
	warm := limiter.Request{Group: group, Rules: []rule.Rule{rule.Must(rule.New("warm", 1, time.Hour))}}
	if _, err := l.Reserve(context.Background(), warm); err != nil {
		t.Fatal(err)
	}

	// The first request's call is in flight; the second waits in the
	// lane for the next call, since the first holds its rule.
	proxy.HoldRepliesAfter([]byte(key))
	first := make(chan error, 1)
	go func() {
		res, err := l.Reserve(context.Background(), req)
		if err == nil && !res.OK() {
			err = errors.New("refused")
		}
		first <- err
	}()
	holding("the first request's call")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	second := make(chan error, 1)
	go func() {
		_, err := l.Reserve(ctx, req)
		second <- err
	}()
	<-queued
	proxy.Release()
	if err := <-first; err != nil {
		t.Fatalf("the first request: %v", err)
	}
	holding("the second request's call")
	cancel()
	if err := <-second; !errors.Is(err, context.Canceled) {
		t.Fatalf("Reserve cancelled while its call was in flight: %v, want context.Canceled", err)
	}
	// Its reply books the slot of a caller that left: the lane gives it
	// back aside, and the proxy holds that call's reply in turn.
	proxy.Release()
	holding("the give-back")

	sctx, scancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	err := l.Shutdown(sctx)
	scancel()
	if err == nil {
		t.Fatal("Shutdown returned while the give-back's call was in flight")
	}
	proxy.Resume()
	if err := l.Close(); err != nil {
		t.Fatalf("Close once the give-back's reply came: %v", err)
	}

	// The slot came back: the rule's second slot of the hour is free.
	reader := limiter.MustNewShared(srv.Client(t), cfg)
	t.Cleanup(func() { reader.Close() })
	res, err := reader.Reserve(context.Background(), req)
	if err != nil || !res.OK() || res.Delay() != 0 {
		t.Fatalf("the rule after the give-back: %+v %v; want its slot at once", res, err)
	}
}
