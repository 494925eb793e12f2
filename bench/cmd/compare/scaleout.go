package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle/bench/internal/redisproc"
	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/rule"
)

// Scale-out runs: decisions per second against the number of replica
// processes on one Redis, and on a 3-master Redis Cluster against one node.
// Every decision admits (limits far above the load) and names one of
// scaleKeys rule sets, spread over scaleGroups provider groups (hash tags),
// as the traffic of several presets, orgs and egress groups is.
const (
	scaleKeys    = 1000
	scaleGroups  = 12
	scaleWorkers = 16 // per process

	// childEnv makes the comparison tool a replica of the replicas run:
	// "<design> <redis address> <duration>"; it prints its decisions.
	childEnv = "THROTTLE_COMPARE_REPLICA"
)

func init() {
	if v := os.Getenv(childEnv); v != "" {
		n, err := replicaChild(v)
		if err != nil {
			fmt.Fprintln(os.Stderr, "replica:", err)
			os.Exit(1)
		}
		fmt.Println(n)
		os.Exit(0)
	}
}

// scaleRule is the rule of key i: far above the load, so every decision
// admits and runs the whole write path.
func scaleRule(i int) rule.Rule {
	return rule.Must(rule.New("k"+strconv.Itoa(i), 1_000_000_000, time.Second, rule.WithBurst(1_000_000)))
}

// decider makes one decision on key i.
type decider func(ctx context.Context, i int) error

// scaleDecider builds a design's decider on a Redis client.
func scaleDecider(design string, rdb redis.UniversalClient) (decider, func(), error) {
	switch design {
	case "throttle", "throttle-nocoalesce":
		s, err := limiter.NewShared(rdb, limiter.SharedConfig{NoCoalescing: design == "throttle-nocoalesce", Timeout: 5 * time.Second})
		if err != nil {
			return nil, nil, err
		}
		rules := make([]rule.Rule, scaleKeys)
		for i := range rules {
			rules[i] = scaleRule(i)
		}
		return func(ctx context.Context, i int) error {
			res, err := s.Reserve(ctx, limiter.Request{Group: "g" + strconv.Itoa(i%scaleGroups), Rules: rules[i : i+1]})
			if err == nil && !res.OK() {
				err = fmt.Errorf("refused")
			}
			return err
		}, func() { s.Close() }, nil
	case "redis_rate":
		l := redis_rate.NewLimiter(rdb)
		lim := redis_rate.PerSecond(1_000_000_000)
		return func(ctx context.Context, i int) error {
			_, err := l.Allow(ctx, "{g"+strconv.Itoa(i%scaleGroups)+"}k"+strconv.Itoa(i), lim)
			return err
		}, func() {}, nil
	}
	return nil, nil, fmt.Errorf("unknown design %q", design)
}

// decide runs workers goroutines deciding on keys in turn for d and returns
// the decisions made.
func decide(ctx context.Context, dec decider, workers int, d time.Duration) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var n, next atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if err := dec(ctx, int(next.Add(1)%scaleKeys)); err != nil {
					if ctx.Err() == nil {
						firstErr.CompareAndSwap(nil, err)
					}
					return
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return n.Load(), err
	}
	return n.Load(), nil
}

// replicaChild is one replica process of the replicas run.
func replicaChild(spec string) (int64, error) {
	f := strings.Fields(spec)
	if len(f) != 3 {
		return 0, fmt.Errorf("want design, address and duration, got %q", spec)
	}
	d, err := time.ParseDuration(f[2])
	if err != nil {
		return 0, err
	}
	rdb := redis.NewClient(&redis.Options{Addr: f[1], PoolSize: scaleWorkers, ContextTimeoutEnabled: true})
	defer rdb.Close()
	dec, stop, err := scaleDecider(f[0], rdb)
	if err != nil {
		return 0, err
	}
	defer stop()
	return decide(context.Background(), dec, scaleWorkers, d)
}

// replicaRow is the decisions per second of n replica processes.
type replicaRow struct {
	design   string
	replicas int
	perSec   float64
}

// runReplicas starts n processes of each design at once, for 1, 2, 4 and 8
// replicas, and sums their decisions.
func runReplicas(ctx context.Context, addr string, d time.Duration) ([]replicaRow, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var rows []replicaRow
	for _, design := range []string{"throttle", "throttle-nocoalesce", "redis_rate"} {
		for _, n := range []int{1, 2, 4, 8} {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			total, err := runProcesses(ctx, self, design, addr, n, d)
			if err != nil {
				return nil, fmt.Errorf("%s, %d replicas: %w", design, n, err)
			}
			rows = append(rows, replicaRow{design, n, float64(total) / d.Seconds()})
			logf("replicas: %-20s %d processes %9.0f decisions/s", design, n, float64(total)/d.Seconds())
		}
	}
	return rows, nil
}

// runProcesses runs n replica processes at once and sums their decisions.
func runProcesses(ctx context.Context, self, design, addr string, n int, d time.Duration) (int64, error) {
	var total atomic.Int64
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.CommandContext(ctx, self)
			cmd.Env = append(os.Environ(), childEnv+"="+design+" "+addr+" "+d.String())
			cmd.Stderr = os.Stderr
			out, err := cmd.Output()
			if err != nil {
				errs[i] = err
				return
			}
			v, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
			errs[i] = err
			total.Add(v)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return 0, err
		}
	}
	return total.Load(), nil
}

// clusterRow is one design's decisions per second on one node and on a
// 3-master cluster, 4 processes' worth of workers in this one.
type clusterRow struct {
	design             string
	single, cluster    float64
	groups, keysPerRun int
	// busiest is the busiest master's share of the scripts' time in
	// Redis (INFO commandstats): a third when the hash tags spread evenly.
	busiest float64
}

// runCluster measures each design on the single node at addr and on a
// 3-master Redis Cluster started here.
func runCluster(ctx context.Context, addr string, d time.Duration) ([]clusterRow, error) {
	bin, err := redisproc.Binary()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "compare-cluster")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	cl, err := redistest.NewCluster(bin, dir, 3, 0)
	if err != nil {
		return nil, err
	}
	defer cl.Stop()
	const workers = 4 * scaleWorkers
	var rows []clusterRow
	for _, design := range []string{"throttle", "throttle-nocoalesce", "redis_rate"} {
		row := clusterRow{design: design, groups: scaleGroups, keysPerRun: scaleKeys}
		single := redis.NewClient(&redis.Options{Addr: addr, PoolSize: workers, ContextTimeoutEnabled: true})
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Masters(), PoolSize: workers, ContextTimeoutEnabled: true})
		for _, c := range []struct {
			rdb redis.UniversalClient
			out *float64
		}{{single, &row.single}, {cc, &row.cluster}} {
			dec, stop, err := scaleDecider(design, c.rdb)
			if err != nil {
				return nil, err
			}
			if err := masterStats(ctx, cl.Masters(), nil); err != nil {
				return nil, err
			}
			n, err := decide(ctx, dec, workers, d)
			stop()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", design, err)
			}
			*c.out = float64(n) / d.Seconds()
		}
		if err := masterStats(ctx, cl.Masters(), &row.busiest); err != nil {
			return nil, err
		}
		single.Close()
		cc.Close()
		logf("cluster: %-20s one node %9.0f/s, 3 masters %9.0f/s", design, row.single, row.cluster)
		rows = append(rows, row)
	}
	return rows, nil
}

// masterStats resets the masters' command statistics (busiest nil), or
// sets busiest to the largest master's share of the scripts' time since.
func masterStats(ctx context.Context, masters []string, busiest *float64) error {
	var total, most float64
	for _, a := range masters {
		c := redis.NewClient(&redis.Options{Addr: a})
		var err error
		if busiest == nil {
			err = c.ConfigResetStat(ctx).Err()
		} else {
			var us float64
			us, err = serverTime(ctx, c)
			total, most = total+us, max(most, us)
		}
		c.Close()
		if err != nil {
			return err
		}
	}
	if busiest != nil && total > 0 {
		*busiest = most / total
	}
	return nil
}

// replicasTable and clusterTable write the scale-out rows as Markdown.
func replicasTable(rows []replicaRow) string {
	var b strings.Builder
	b.WriteString("| design | 1 process | 2 | 4 | 8 | 8 against 1 |\n|---|---:|---:|---:|---:|---:|\n")
	for i := 0; i+3 < len(rows); i += 4 {
		r := rows[i : i+4]
		fmt.Fprintf(&b, "| %s | %.0f | %.0f | %.0f | %.0f | %.2f× |\n", r[0].design, r[0].perSec, r[1].perSec, r[2].perSec, r[3].perSec,
			r[3].perSec/max(r[0].perSec, 1))
	}
	return b.String()
}

func clusterTable(rows []clusterRow) string {
	var b strings.Builder
	b.WriteString("| design | one node, decisions/s | 3-master cluster | cluster against one node | busiest master's share of Redis time |\n|---|---:|---:|---:|---:|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %.0f | %.0f | %.2f× | %.0f%% |\n", r.design, r.single, r.cluster, r.cluster/max(r.single, 1), 100*r.busiest)
	}
	return b.String()
}
