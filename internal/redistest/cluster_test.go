package redistest_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle/internal/redistest"
)

func TestClusterServesEverySlot(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3, 0)
	if got := len(c.Masters()); got != 3 {
		t.Fatalf("%d masters, want 3", got)
	}
	if got := len(c.Addrs()); got != 3 {
		t.Fatalf("%d nodes, want 3", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cc := c.Client(t)
	slots, err := cc.ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	covered := 0
	owners := map[string]bool{}
	for _, s := range slots {
		covered += s.End - s.Start + 1
		owners[s.Nodes[0].Addr] = true
	}
	if covered != 16384 || len(owners) != 3 {
		t.Fatalf("slots cover %d with %d owners, want 16384 over 3", covered, len(owners))
	}
	// Keys land on every master, and a script over one hash tag runs.
	for i := 0; i < 200; i++ {
		k := fmt.Sprintf("k%d", i)
		if err := cc.Set(ctx, k, i, time.Minute).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
	}
	for _, m := range c.Masters() {
		n := redis.NewClient(&redis.Options{Addr: m})
		size, err := n.DBSize(ctx).Result()
		n.Close()
		if err != nil || size == 0 {
			t.Errorf("master %s holds %d keys (%v), want some", m, size, err)
		}
	}
	script := redis.NewScript(`redis.call("SET", KEYS[1], ARGV[1]); return redis.call("INCR", KEYS[2])`)
	if n, err := script.Run(ctx, cc, []string{"{tag}:a", "{tag}:b"}, "x").Int(); err != nil || n != 1 {
		t.Fatalf("script on one hash tag: %d, %v", n, err)
	}
}

// Both ways a replica takes over: the coordinated CLUSTER FAILOVER, and the
// election after its master dies. Data the replica had survives either way.
func TestClusterTakeOver(t *testing.T) {
	cases := []struct {
		name     string
		takeOver func(*redistest.Cluster, testing.TB, string) (string, string)
	}{
		{"manual failover", (*redistest.Cluster).Failover},
		{"master killed", (*redistest.Cluster).KillMaster},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := redistest.StartCluster(t, 3, 1)
			if got := len(c.Addrs()); got != 6 {
				t.Fatalf("%d nodes, want 6", got)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cc := c.Client(t)
			const key = "{throttle:g}:r:k"
			if err := cc.Set(ctx, key, "v", 0).Err(); err != nil {
				t.Fatal(err)
			}
			// Make sure the replica has the write before its master goes.
			if err := cc.Do(ctx, "wait", 1, 5000).Err(); err != nil {
				t.Fatal(err)
			}
			before := c.Masters()
			start := time.Now()
			from, to := tc.takeOver(c, t, key)
			t.Logf("%s: %s -> %s in %v", tc.name, from, to, time.Since(start).Round(time.Millisecond))
			if from == to || !slices.Contains(before, from) || slices.Contains(before, to) {
				t.Fatalf("took over from %s to %s; masters were %v", from, to, before)
			}
			after := c.Masters()
			if len(after) != 3 || slices.Contains(after, from) || !slices.Contains(after, to) {
				t.Fatalf("masters %v after %s -> %s", after, from, to)
			}
			// The client learns the new topology from a MOVED reply or,
			// when the old master is gone, from its next state reload: a
			// few failed calls are expected, but it must get there.
			var (
				got   string
				err   error
				tries int
			)
			for tries = 1; ; tries++ {
				got, err = cc.Get(ctx, key).Result()
				if err == nil || ctx.Err() != nil {
					break
				}
				select {
				case <-ctx.Done():
				case <-time.After(50 * time.Millisecond): // the client reloads state on its own schedule
				}
			}
			if err != nil || got != "v" {
				t.Fatalf("GET after take-over: %q, %v", got, err)
			}
			t.Logf("client found the new master after %d GET(s)", tries)
			owner := redis.NewClient(&redis.Options{Addr: to})
			defer owner.Close()
			if n, err := owner.Exists(ctx, key).Result(); err != nil || n != 1 {
				t.Fatalf("new master %s holds the key: %d, %v", to, n, err)
			}
		})
	}
}
