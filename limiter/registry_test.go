package limiter_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle/internal/faultproxy"
	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/limitertest"
)

// Replicas find each other through the registry, and one that leaves drops
// out of the count of the others.
func TestRegistryCountsLiveReplicas(t *testing.T) {
	srv := redistest.Shared(t)
	prefix := limitertest.Group(t)
	var regs []*limiter.Registry
	for i := 0; i < 3; i++ {
		r := limiter.StartRegistry(srv.Client(t), prefix, 20*time.Millisecond)
		t.Cleanup(r.Close)
		regs = append(regs, r)
	}
	until := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 5s", what)
			}
			time.Sleep(10 * time.Millisecond) // polling beats of background goroutines
		}
	}
	until("all see 3", func() bool {
		return regs[0].Live() == 3 && regs[1].Live() == 3 && regs[2].Live() == 3
	})
	if s := regs[0].Share(); s != 1.0/3 {
		t.Fatalf("Share = %v, want 1/3", s)
	}
	regs[2].Close()
	until("the others see 2", func() bool { return regs[0].Live() == 2 && regs[1].Live() == 2 })
}

// A beat dated ahead of Redis's clock (written before a failover to a
// master whose clock is behind, or by hand) does not count a replica that
// is gone: it used to, until Redis's clock reached it, shrinking every
// replica's share in an outage.
func TestRegistryDropsBeatsFromTheFuture(t *testing.T) {
	srv := redistest.Shared(t)
	prefix := limitertest.Group(t)
	ghost := float64(time.Now().Add(time.Hour).UnixMilli())
	if err := srv.Client(t).ZAdd(context.Background(), "{"+prefix+":registry}:replicas", redis.Z{Score: ghost, Member: "ghost"}).Err(); err != nil {
		t.Fatal(err)
	}
	c := srv.Client(t)
	key := "{" + prefix + ":registry}:replicas"
	r := limiter.StartRegistry(c, prefix, 20*time.Millisecond)
	t.Cleanup(r.Close)
	// Two beats of this replica: the second counts what the first left.
	var first float64
	for deadline := time.Now().Add(5 * time.Second); ; {
		if time.Now().After(deadline) {
			t.Fatal("this replica did not beat twice within 5s")
		}
		time.Sleep(5 * time.Millisecond) // polling beats of a background goroutine
		ids, err := c.ZRangeWithScores(context.Background(), key, 0, -1).Result()
		if err != nil {
			continue
		}
		var self float64
		for _, z := range ids {
			if z.Member != "ghost" {
				self = z.Score
			}
		}
		if first == 0 {
			first = self
		} else if self > first {
			break
		}
	}
	if n := r.Live(); n != 1 {
		t.Fatalf("Live = %d with a beat an hour ahead, want 1 (this replica alone)", n)
	}
	if c.ZScore(context.Background(), key, "ghost").Err() == nil {
		t.Fatal("the beat an hour ahead is still in the registry")
	}
}

// A Redis that comes back empty does not make a replica think it is alone
// while the others re-register: the count holds for a few beats, then
// follows replicas that really left.
func TestRegistryKeepsCountWhenRedisComesBackEmpty(t *testing.T) {
	srv := redistest.Shared(t)
	c := srv.Client(t)
	ctx := context.Background()
	prefix := limitertest.Group(t)
	key := "{" + prefix + ":registry}:replicas"
	// The count holds for the last 4 beats: at 200 ms a beat, the polls
	// below (every 5 ms) find the first two beats after the loss with
	// hundreds of ms to spare on a loaded machine.
	r := limiter.StartRegistry(c, prefix, 200*time.Millisecond)
	t.Cleanup(r.Close)
	// Two other replicas, beating through a proxy that this test stalls:
	// they stop beating without leaving, as replicas cut off do.
	proxy := faultproxy.Start(t, srv.Addr)
	others := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	t.Cleanup(func() { others.Close() })
	for range 2 {
		o := limiter.StartRegistry(others, prefix, 200*time.Millisecond)
		t.Cleanup(o.Close)
	}
	t.Cleanup(proxy.Resume) // before the Closes: they leave the registry
	until := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 5s", what)
			}
			time.Sleep(5 * time.Millisecond) // polling beats of a background goroutine
		}
	}
	until("sees 3", func() bool { return r.Live() == 3 })

	// Redis comes back empty; only this replica beats.
	proxy.Stall()
	if err := c.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	var first float64
	until("re-registered", func() bool {
		ids, err := c.ZRangeWithScores(ctx, key, 0, -1).Result()
		if err == nil && len(ids) == 1 {
			first = ids[0].Score
			return true
		}
		return false
	})
	// A second beat after it: the first one's count has been taken in.
	until("beat again", func() bool {
		ids, _ := c.ZRangeWithScores(ctx, key, 0, -1).Result()
		return len(ids) == 1 && ids[0].Score > first
	})
	if n := r.Live(); n != 3 {
		t.Fatalf("right after Redis came back empty, Live = %d, want the 3 seen before", n)
	}
	until("follows the replicas that left", func() bool { return r.Live() == 1 })
}

// A penalty recorded by one replica is announced to the others at once.
func TestWatchPenalties(t *testing.T) {
	srv := redistest.Shared(t)
	prefix := limitertest.Group(t)
	a, err := limiter.NewRedis(srv.Client(t), limiter.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	b, err := limiter.NewRedis(srv.Client(t), limiter.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan limiter.Penalty, 4)
	stop := a.WatchPenalties(func(group string, p limiter.Penalty) {
		if group == "dingtalk" {
			got <- p
		}
	}, nil, nil)
	defer stop()
	until := time.Now().Add(time.Minute).Truncate(time.Microsecond)
	// The subscription is set up in the background: announce until heard.
	deadline := time.After(5 * time.Second)
	for i := 0; ; i++ {
		p := limiter.Penalty{Scope: "egress:default", Until: until.Add(time.Duration(i) * time.Microsecond), Code: "1111"}
		if err := b.Penalize(context.Background(), "dingtalk", p); err != nil {
			t.Fatal(err)
		}
		select {
		case seen := <-got:
			if seen.Scope != "egress:default" || seen.Code != "1111" || seen.Until.Before(until) {
				t.Fatalf("announced %+v, want the egress penalty", seen)
			}
			stop()
			stop() // idempotent
			return
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatal("no announcement within 5s")
		}
	}
}

// A replica with a fixed Share sends on its own during an outage as much
// as one counted by the registry, so it joins the registry too: replicas
// that take 1 / live replicas must count it (a fleet of three on a fixed
// Share of 0.25 and one on the registry sent 1.7 times a rule in an
// outage when the one counted only itself).
func TestFixedShareReplicaIsCounted(t *testing.T) {
	srv := redistest.Shared(t)
	c := srv.Client(t)
	prefix := limitertest.Group(t)
	fixed := limiter.MustNewShared(c, limiter.SharedConfig{Prefix: prefix, Share: 0.25})
	t.Cleanup(func() { _ = fixed.Close() })
	key := "{" + prefix + ":registry}:replicas"
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := c.ZCard(context.Background(), key).Result()
		if err == nil && n == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("replicas in the registry: %d (%v), want the one with a fixed Share", n, err)
		}
		time.Sleep(10 * time.Millisecond) // polling the background beat
	}
}
