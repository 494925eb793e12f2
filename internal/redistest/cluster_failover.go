package redistest

import (
	"context"
	"strconv"
	"testing"
)

// Failover makes a replica of the master owning key's slot take over with
// CLUSTER FAILOVER, the coordinated manual failover: the master stops
// accepting writes, the replica catches up and is promoted, so no write is
// lost. It returns once every live node is ok and agrees that the replica
// owns the slot, and reports the old and the new master.
func (c *Cluster) Failover(tb testing.TB, key string) (from, to string) {
	tb.Helper()
	return c.takeOver(tb, key, false)
}

// KillMaster kills (SIGKILL) the master owning key's slot and returns once
// its replica has been elected in its place and every live node is ok again,
// which takes about twice NodeTimeout. Unlike Failover, writes the master
// had not yet replicated are lost, as in a real crash.
func (c *Cluster) KillMaster(tb testing.TB, key string) (from, to string) {
	tb.Helper()
	return c.takeOver(tb, key, true)
}

func (c *Cluster) takeOver(tb testing.TB, key string, kill bool) (from, to string) {
	tb.Helper()
	slot := c.Slot(tb, key)
	ctx, cancel := context.WithTimeout(context.Background(), formTimeout)
	defer cancel()
	var master *clusterNode
	var replicas []*clusterNode
	for _, n := range c.live() {
		slots, err := n.admin.ClusterSlots(ctx).Result()
		if err != nil {
			continue
		}
		for _, s := range slots {
			if s.Start <= slot && slot <= s.End {
				for i, sn := range s.Nodes {
					node := c.byAddr(sn.Addr)
					switch {
					case node == nil:
					case i == 0:
						master = node
					default:
						replicas = append(replicas, node)
					}
				}
			}
		}
		break
	}
	if master == nil || len(replicas) == 0 {
		tb.Fatalf("redistest: slot %d of %q has no master with a replica to fail over to\n%s", slot, key, c.describe())
	}
	if kill {
		master.srv.Stop()
		c.mu.Lock()
		master.dead = true
		c.mu.Unlock()
	} else if err := replicas[0].admin.ClusterFailover(ctx).Err(); err != nil {
		tb.Fatalf("redistest: CLUSTER FAILOVER on %s: %v", replicas[0].srv.Addr, err)
	}
	// With several replicas, any of them may win the election.
	var winner string
	err := c.waitFor(ctx, "a replica to take slot "+strconv.Itoa(slot)+" over", func(ctx context.Context) error {
		var err error
		for _, r := range replicas {
			if err = c.healthy(ctx, r.srv.Addr, slot); err == nil {
				winner = r.srv.Addr
				return nil
			}
		}
		return err
	})
	if err != nil {
		tb.Fatalf("redistest: failing over %s: %v\n%s", master.srv.Addr, err, c.describe())
	}
	c.mu.Lock()
	for i, m := range c.masters {
		if m == master.srv.Addr {
			c.masters[i] = winner
		}
	}
	c.mu.Unlock()
	return master.srv.Addr, winner
}

func (c *Cluster) byAddr(addr string) *clusterNode {
	for _, n := range c.nodes {
		if n.srv.Addr == addr {
			return n
		}
	}
	return nil
}
