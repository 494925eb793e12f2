package limiter_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/rule"
)

// 22.4: a penalty learnt while Redis is down reaches Redis, and the other
// replicas through its announcement, within about a second of Redis
// answering again, though the learning replica makes no further request
// (its breaker stops the scope's) and is still within its Recover hold.
func TestSharedSharesOutagePenaltyWithoutRequests(t *testing.T) {
	srv := redistest.Start(t)
	client := func() *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialTimeout: 100 * time.Millisecond, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		return c
	}
	cfg := limiter.SharedConfig{Share: 0.5, Timeout: 200 * time.Millisecond, Probe: 100 * time.Millisecond, Recover: 5 * time.Second}
	learner := newShared(t, client(), cfg)
	var heard atomic.Int64
	newShared(t, client(), cfg, limiter.Listener{Penalty: func(group string, p limiter.Penalty) {
		if group == "g" && p.Scope == "app" {
			heard.CompareAndSwap(0, time.Now().UnixNano())
		}
	}})
	ctx := context.Background()
	req := limiter.Request{Group: "g", Rules: []rule.Rule{rule.Must(rule.New("api", 1000, time.Second))}, Scopes: []string{"app"}, MaxWait: time.Second}
	if _, err := learner.Reserve(ctx, req); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	if res, err := learner.Reserve(ctx, req); err != nil || !res.Local() {
		t.Fatalf("with Redis stopped: %+v %v, want a local slot", res, err)
	}
	if err := learner.Penalize(ctx, "g", limiter.Penalty{Scope: "app", Until: time.Now().Add(10 * time.Second), Code: "90018"}); err != nil {
		t.Fatal(err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	check := srv.Client(t)
	var written time.Time
	waitFor(t, 5*time.Second, "penalty key in Redis", func() bool {
		if check.Exists(ctx, learner.Redis().PenaltyKey("g", "app")).Val() == 1 {
			written = time.Now()
			return true
		}
		return false
	})
	waitFor(t, 5*time.Second, "announcement heard by the other replica", func() bool { return heard.Load() != 0 })
	heardAt := time.Unix(0, heard.Load())
	t.Logf("written %v, heard %v after Redis answered again", written.Sub(back), heardAt.Sub(back))
	// About a second (a missed first announcement is made again after
	// reannounceAfter); 3 s leaves room for a loaded machine and is still
	// well before the learner's Recover of 5 s, which is not what shares it.
	if d := heardAt.Sub(back); d > 3*time.Second {
		t.Fatalf("the other replica heard of the penalty %v after Redis was back, want about a second", d)
	}
	if !learner.Down() {
		t.Log("the learner left its fallback meanwhile (not what shared the penalty)")
	}
}
