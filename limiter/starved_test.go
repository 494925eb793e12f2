package limiter_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/rule"
)

// 22.6: a replica whose requests Redis all refused still learns how far
// ahead the fleet booked, from the refusals, so when Redis goes away its
// local slots start a period after the others' last Redis slot: no window
// of the provider's limit holds more than the limit, counted from the slots
// both replicas booked and waited for.
func TestStarvedReplicaWaitsForTheFleetAtTheSwitch(t *testing.T) {
	if testing.Short() {
		t.Skip("seconds of Redis faults or load: make test runs it, make test-short does not")
	}
	const limit = 20
	srv := redistest.Start(t)
	newReplica := func() *limiter.Shared {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialTimeout: 100 * time.Millisecond, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		// Half of the rule each on its own; no probe back within the test.
		return newShared(t, c, limiter.SharedConfig{Share: 0.5, Timeout: 200 * time.Millisecond, Probe: time.Hour, Recover: time.Hour})
	}
	busy, starved := newReplica(), newReplica()
	ctx := context.Background()
	rl := rule.Must(rule.New("api", limit, time.Second))
	req := func(wait time.Duration) limiter.Request {
		return limiter.Request{Group: "g", Rules: []rule.Rule{rl}, Scopes: []string{"api"}, MaxWait: wait}
	}

	var mu sync.Mutex
	var sent []time.Time
	var wg sync.WaitGroup
	// send waits for res's slot and records when it was booked for (Redis
	// and this machine share one clock): the slots are the limiter's
	// decision, how late a goroutine wakes on a loaded machine is not.
	send := func(res limiter.Reservation) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := res.Wait(ctx); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			sent = append(sent, res.SendAt())
			mu.Unlock()
		}()
	}

	// The busy replica books 1.5s of the rule on Redis.
	for range limit * 3 / 2 {
		res, err := busy.Reserve(ctx, req(2*time.Second))
		if err != nil || !res.OK() || res.Local() {
			t.Fatalf("busy replica on Redis: %+v %v", res, err)
		}
		send(res)
	}
	// The starved one asks for a slot within 100ms: refused, every time.
	for range 3 {
		res, err := starved.Reserve(ctx, req(100*time.Millisecond))
		if err != nil || res.OK() {
			t.Fatalf("starved replica: %+v %v, want a refusal", res, err)
		}
	}
	srv.Stop()
	// The starved replica now limits on its own with half the rule.
	for range limit / 2 {
		res, err := starved.Reserve(ctx, req(10*time.Second))
		if err != nil || !res.OK() || !res.Local() {
			t.Fatalf("starved replica with Redis gone: %+v %v, want a local slot", res, err)
		}
		send(res)
	}
	wg.Wait()

	// The most sends in any window of the rule's period, less a margin for
	// the rounding of the two clocks' readings.
	slices.SortFunc(sent, func(a, b time.Time) int { return a.Compare(b) })
	window := rl.Period() - 10*time.Millisecond
	most, lo := 0, 0
	for hi := range sent {
		for sent[hi].Sub(sent[lo]) >= window {
			lo++
		}
		most = max(most, hi-lo+1)
	}
	if most > limit {
		t.Fatalf("%d sends within %v across the replicas, over the limit of %d: the starved replica's local slots overlap the busy one's Redis slots", most, window, limit)
	}
	t.Logf("at most %d sends within %v", most, window)
}
