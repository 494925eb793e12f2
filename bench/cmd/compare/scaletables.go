package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// scaleRows are the measurements of tables 8 to 10, for their charts.
type scaleRows struct {
	isv      []isvRow
	replicas []replicaRow
	cluster  []clusterRow
}

// scaleReport runs tables 8 to 10 (the ISV footprint, replica processes,
// the Redis Cluster) on the server at addr and returns their Markdown and
// rows; mline is the machine line each table repeats.
func scaleReport(ctx context.Context, c config, addr, mline string, out *scaleRows) (string, error) {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	dur := 1500 * time.Millisecond
	orgs := []int{10, 100, 1000, 10000}
	if c.quick {
		dur, orgs = 500*time.Millisecond, []int{10, 100}
	}
	if c.want(8) {
		rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 64})
		var rows []isvRow
		for _, n := range orgs {
			r, err := isvFootprint(ctx, rdb, n)
			if err != nil {
				rdb.Close()
				return "", fmt.Errorf("table 8, %d orgs: %w", n, err)
			}
			logf("table 8: %d orgs x %d APIs: at most %d keys and %.1f MiB at once, %d keys left, %d without expiry, the longest-lived %s (%v)",
				n, r.apis, r.peakKeys, float64(r.peakBytes)/(1<<20), r.keys, r.noTTL, r.maxKey, r.maxTTL)
			rows = append(rows, r)
		}
		rdb.FlushAll(ctx)
		rdb.Close()
		out.isv = rows
		w("## 8. Redis memory against orgs × APIs: a DingTalk ISV suite\n\n")
		w("A DingTalk ISV suite calls %d APIs in each of n customer orgs, one call per org and API, through a\n", len(isvAPIs))
		w("Transport on a flushed Redis (32 callers), with `DBSIZE` and `INFO memory` sampled every 50 ms; then\n")
		w("every key's `PTTL` and `MEMORY USAGE`. Each org and API is one paced rule key that lives until the\n")
		w("last slot booked in it has passed (plus a few keys of the suite: its rate, egress rule, registry), so\n")
		w("what Redis holds follows the calls of the last moments, not every org and API ever called. A key\n")
		w("without an expiry would be a leak.\n\n")
		w("%s\n\n%s\n", mline, isvTable(rows))
	}
	if c.want(9) {
		rows, err := runReplicas(ctx, addr, dur)
		if err != nil {
			return "", fmt.Errorf("table 9: %w", err)
		}
		out.replicas = rows
		w("## 9. Decisions per second against replica processes on one Redis\n\n")
		w("1, 2, 4 and 8 processes (not goroutines) of %d workers each decide at once on one Redis, every\n", scaleWorkers)
		w("decision on one of %d rule sets over %d groups (hash tags), limits far above the load; %v per run.\n", scaleKeys, scaleGroups, dur)
		w("The processes and Redis share the machine's cores, so past two processes the sum is bounded by\n")
		w("the CPU, not by the design: the table shows that replicas add no cost of their own.\n\n")
		w("%s\n\n%s\n", mline, replicasTable(rows))
	}
	if c.want(10) {
		rows, err := runCluster(ctx, addr, dur)
		if err != nil {
			return "", fmt.Errorf("table 10: %w", err)
		}
		out.cluster = rows
		w("## 10. A 3-master Redis Cluster against one node\n\n")
		w("%d workers decide on %d rule sets over %d groups (several providers and egress groups, each its own\n", 4*scaleWorkers, scaleKeys, scaleGroups)
		w("hash tag), on the single node and on a 3-master cluster started here (no replicas), %v each.\n", dur)
		w("On this machine the client and every node share two cores, so the cluster cannot go faster in\n")
		w("total; what it shows is that a group's keys stay on one shard and groups spread over the shards (the\n")
		w("busiest master's share of the scripts' time), which is what lets a deployment that outgrows one\n")
		w("Redis add shards (docs/design.md, section 4).\n\n")
		w("%s\n\n%s\n", mline, clusterTable(rows))
	}
	return b.String(), nil
}
