package limiter_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter"
)

// aclClient makes a Redis user with every right but those denied (e.g.
// "-publish") and returns a client logged in as it.
func aclClient(t *testing.T, srv *redistest.Server, name string, deny ...string) *redis.Client {
	t.Helper()
	admin := srv.Client(t)
	args := []any{"ACL", "SETUSER", name, "reset", "on", ">pw", "~*", "&*", "+@all"}
	for _, d := range deny {
		args = append(args, d)
	}
	if err := admin.Do(context.Background(), args...).Err(); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: name, Password: "pw"})
	t.Cleanup(func() { c.Close() })
	return c
}

// 22.8: without PUBLISH a penalty is written and reported as written, not
// announced (not "store unavailable"); the fault is logged once with what it
// means and kept in the replica's fault key while it lasts.
func TestSharedWithoutPublish(t *testing.T) {
	srv := redistest.Shared(t)
	c := aclClient(t, srv, "nopublish", "-publish")
	var buf syncBuffer
	s := newShared(t, c, limiter.SharedConfig{Prefix: "aclpub", Share: 1, Logger: slog.New(slog.NewTextHandler(&buf, nil)), Timeout: 5 * time.Second})
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		err := s.Penalize(ctx, "g", limiter.Penalty{Scope: "app" + string(rune('a'+i)), Until: time.Now().Add(time.Minute), Code: "90018"})
		if !errors.Is(err, limiter.ErrNotAnnounced) || errors.Is(err, limiter.ErrUnavailable) {
			t.Fatalf("Penalize without PUBLISH: %v, want ErrNotAnnounced and not ErrUnavailable", err)
		}
	}
	admin := srv.Client(t)
	if n := admin.Exists(ctx, s.Redis().PenaltyKey("g", "appa")).Val(); n != 1 {
		t.Fatal("the penalty is not in Redis")
	}
	key := "{aclpub:registry}:fault:" + s.ReplicaID()
	var v string
	waitFor(t, 5*time.Second, "the fault key", func() bool { v = admin.Get(ctx, key).Val(); return v != "" })
	if !strings.HasPrefix(v, "publish: ") {
		t.Fatalf("fault key %q, want publish: <error>", v)
	}
	if ttl := admin.TTL(ctx, key).Val(); ttl <= 0 || ttl > time.Minute {
		t.Fatalf("fault key TTL %v, want about a minute", ttl)
	}
	if n := strings.Count(buf.String(), "may not PUBLISH"); n != 1 {
		t.Fatalf("logged %d times, want once: %s", n, buf.String())
	}
	// Granted again: the next penalty clears the fault, and its key goes.
	if err := admin.Do(ctx, "ACL", "SETUSER", "nopublish", "+publish").Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Penalize(ctx, "g", limiter.Penalty{Scope: "appz", Until: time.Now().Add(time.Minute), Code: "90018"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the fault key to go", func() bool { return admin.Exists(ctx, key).Val() == 0 })
}

// 22.8: without SUBSCRIBE the fault is logged and kept in the fault key,
// and a lift still reaches the replica within about a second (it re-reads
// the penalties it knows of).
func TestSharedWithoutSubscribe(t *testing.T) {
	srv := redistest.Shared(t)
	c := aclClient(t, srv, "nosubscribe", "-subscribe")
	var buf syncBuffer
	var lifted atomic.Int64
	s := newShared(t, c, limiter.SharedConfig{Prefix: "aclsub", Share: 1, Logger: slog.New(slog.NewTextHandler(&buf, nil)), Timeout: 5 * time.Second},
		limiter.Listener{Lift: func(group, scope string) {
			if group == "g" && scope == "app" {
				lifted.Store(time.Now().UnixNano())
			}
		}})
	ctx := context.Background()
	admin := srv.Client(t)
	key := "{aclsub:registry}:fault:" + s.ReplicaID()
	var v string
	waitFor(t, 5*time.Second, "the fault key", func() bool { v = admin.Get(ctx, key).Val(); return v != "" })
	if !strings.HasPrefix(v, "subscribe: ") || !strings.Contains(buf.String(), "will not hear") {
		t.Fatalf("fault key %q, log %q", v, buf.String())
	}
	if err := s.Penalize(ctx, "g", limiter.Penalty{Scope: "app", Until: time.Now().Add(time.Hour), Code: "90018"}); err != nil {
		t.Fatal(err)
	}
	// Another replica (throttlectl) lifts it.
	other := newShared(t, srv.Client(t), limiter.SharedConfig{Prefix: "aclsub", Share: 1})
	liftAt := time.Now()
	if _, err := other.LiftPenalty(ctx, "g", "app"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the lift", func() bool { return lifted.Load() != 0 })
	if d := time.Unix(0, lifted.Load()).Sub(liftAt); d > 2*time.Second {
		t.Fatalf("lift heard %v after it, want about a second", d)
	}
}

// waitFor polls cond (every 10ms) until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s after %v", what, d)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition, not standing in for synchronisation
	}
}
