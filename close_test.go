package throttle_test

import (
	"context"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/apps"
	"github.com/quotaware/throttle/internal/faultproxy"
	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/limitertest"
)

// closeBound is how long Close may take whatever Redis does: its drain time
// (2s, backgroundDrain) and a generous margin for a loaded machine. The bound
// is structural (Close stops waiting once the drain is over), so the margin
// only absorbs scheduling.
const closeBound = 2*time.Second + 500*time.Millisecond

// silentListener accepts connections and never answers on them, as a Redis
// behind a path that drops every reply would.
func silentListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// 24.5: Transport.Close returns within its drain time when Redis does not
// answer, with work queued for Redis (penalties written off the request
// path) and the replica registry, the watch and the fault key all waiting
// on it; with a client that honours context deadlines and with one that
// does not (its read timeout is 3s).
func TestCloseIsBoundedWhenRedisDoesNotAnswer(t *testing.T) {
	if testing.Short() {
		t.Skip("seconds of Redis faults or load: make test runs it, make test-short does not")
	}
	cases := []struct {
		name    string
		stalled bool // a real Redis that stops answering after the Transport used it
		ctxTime bool // ContextTimeoutEnabled
	}{
		{"stalled redis, context deadlines", true, true},
		{"stalled redis, read timeout only", true, false},
		{"silent listener, context deadlines", false, true},
		{"silent listener, read timeout only", false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var addr string
			var proxy *faultproxy.Proxy
			if tc.stalled {
				srv := redistest.Start(t)
				var err error
				if proxy, err = faultproxy.New(srv.Addr); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { proxy.Close() })
				addr = proxy.Addr()
			} else {
				addr = silentListener(t)
			}
			rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: tc.ctxTime, MaxRetries: -1})
			t.Cleanup(func() { rdb.Close() })
			rec := &recorder{answer: func(w http.ResponseWriter, r *http.Request) {
				// Every answer is a penalty, written to Redis off the
				// request path.
				w.Header().Set("X-Test-Penalty-Ms", "60000")
				w.Write([]byte(`{}`))
			}}
			httpSrv := serve(t, rec)
			group := limitertest.Group(t)
			tr := throttle.MustNew(sharedOpt(t, rdb, limiter.SharedConfig{Share: 1, Timeout: 100 * time.Millisecond, Probe: 50 * time.Millisecond}),
				throttle.WithoutTelemetry(), throttle.WithoutRetry(),
				throttle.WithProfiles(testProfile(group, mustRule(t, 1000, time.Second))))
			c := &http.Client{Transport: tr}
			send := func(n int) {
				for i := range n {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					_, _ = get(ctx, c, httpSrv.URL+"/p"+string(rune('a'+i)))
					cancel()
				}
			}
			if tc.stalled {
				send(2) // on Redis: the watch and the pool are set up
				proxy.Stall()
			}
			// Without context deadlines each call to Redis waits out the
			// client's read timeout: one request is enough to queue work.
			if tc.ctxTime {
				send(8)
			} else {
				send(1)
			}
			began := time.Now()
			err := tr.Close()
			if took := time.Since(began); took > closeBound {
				t.Fatalf("Close took %v with Redis not answering, want under %v", took, closeBound)
			} else {
				t.Logf("Close took %v (%v)", took, err)
			}
		})
	}
}

// A New that fails leaves the limiter the caller gave it open: the caller
// may try again with it. It used to shut it down (it had left the replica
// registry by the time New returned).
func TestFailedNewLeavesTheCallersLimiterOpen(t *testing.T) {
	srv := redistest.Shared(t)
	c := srv.Client(t)
	prefix := limitertest.Group(t)
	s, err := limiter.NewShared(c, limiter.SharedConfig{Prefix: prefix, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	registry := "{" + prefix + ":registry}:replicas"
	registered := func() int64 { return c.ZCard(context.Background(), registry).Val() }
	for deadline := time.Now().Add(5 * time.Second); registered() != 1; {
		if time.Now().After(deadline) {
			t.Fatal("the limiter did not register within 5s")
		}
		time.Sleep(10 * time.Millisecond) // polling the registry's first beat
	}
	if _, err := throttle.New(throttle.WithLimiter(s), throttle.WithProfiles(testProfile(prefix, mustRule(t, 10, time.Second))),
		throttle.WithApps(apps.Config{NegativeTTL: -1})); err == nil {
		t.Fatal("New with an invalid WithApps succeeded")
	}
	if n := registered(); n != 1 {
		t.Fatalf("after the failed New the registry holds %d replicas, want the caller's limiter still in it", n)
	}
	tr, err := throttle.New(throttle.WithLimiter(s), throttle.WithProfiles(testProfile(prefix, mustRule(t, 10, time.Second))))
	if err != nil {
		t.Fatalf("New again with the same limiter: %v", err)
	}
	tr.Close()
}
