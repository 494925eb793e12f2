package limiter

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle/internal/faultproxy"
	"github.com/quotaware/throttle/internal/redistest"
)

// A re-read of the known penalties that finds a key gone passes the lift
// on only when no penalty of that scope was recorded here while the read
// was in flight: it passed it on before, closing the new penalty's breaker
// and dropping its copy kept for outages.
func TestLiftReadRacingANewPenalty(t *testing.T) {
	srv := redistest.Shared(t)
	proxy := faultproxy.Start(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	t.Cleanup(func() { rdb.Close() })
	l, err := newRedis(rdb, withPrefix("stalelift"))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var lifted []string
	w := l.watch(watcherConfig{onLift: func(_, scope string) { mu.Lock(); lifted = append(lifted, scope); mu.Unlock() }})
	t.Cleanup(w.stop)

	// Two known penalties whose keys are gone, both lifted (their marks
	// there): "old" stays lifted, "renewed" gets a new penalty here while
	// the re-read is in flight.
	for _, scope := range []string{"old", "renewed"} {
		if err := srv.Client(t).Set(context.Background(), l.markKey("g", scope), "1", time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	w.remember("g", Penalty{Scope: "old", Until: now.Add(time.Hour)})
	w.remember("g", Penalty{Scope: "renewed", Until: now.Add(time.Hour)})
	proxy.HoldRepliesAfter([]byte("exists"))
	t.Cleanup(proxy.Resume)
	w.recheck <- struct{}{}
	for deadline := time.Now().Add(10 * time.Second); proxy.Holding() == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the re-read was not sent within 10s")
		}
		time.Sleep(time.Millisecond) // polls the proxy's state
	}
	// This replica records the new penalty: its key, then the watcher's
	// copy, as Penalize does.
	if err := srv.Client(t).Set(context.Background(), l.penaltyKey("g", "renewed"), "1|x", 2*time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	w.remember("g", Penalty{Scope: "renewed", Until: now.Add(2 * time.Hour)})
	proxy.Resume()
	// The pass has ended once poll takes the next recheck.
	w.recheck <- struct{}{}
	for deadline := time.Now().Add(10 * time.Second); len(w.recheck) > 0; {
		if time.Now().After(deadline) {
			t.Fatal("the re-read did not end within 10s")
		}
		time.Sleep(time.Millisecond) // polls the watcher's channel
	}
	mu.Lock()
	defer mu.Unlock()
	if len(lifted) != 1 || lifted[0] != "old" {
		t.Fatalf("lifts passed on: %v, want only the old penalty's", lifted)
	}
	if end := w.knownEnd(penaltyID{"g", "renewed"}); !end.Equal(now.Add(2 * time.Hour)) {
		t.Fatalf("the renewed penalty is known until %v, want the new end", end)
	}
}
