package main

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// tput is one design's decision throughput.
type tput struct {
	d        design
	ops      float64 // decisions per second
	admitted float64 // share of decisions that admitted
	p50, p99 time.Duration
	allocs   float64 // heap allocations per decision, whole process
	ratio    float64 // ops / ceiling ops
	serverUs float64 // µs Redis spent executing commands, per decision
	// CPU time per decision (µs, user and system): this process's (the
	// design's client and the workers) and the Redis server's, whole.
	clientCPU, redisCPU float64
}

const maxSamplesPerWorker = 50_000

// runThroughput runs `workers` goroutines deciding on one hot key of a limit
// far above the load, so every decision admits and runs the whole write.
func runThroughput(ctx context.Context, addr string, d design, workers int, warmup, dur time.Duration, round int) (tput, error) {
	// 1,000,000/s is far above the load, yet every design still writes:
	// at 1e9/s redis_rate's emission interval (1 ns) vanishes in its float
	// seconds, new_tat equals now, and it skips its SET, which would make
	// it look faster than the write path it really runs.
	return runThroughputAt(ctx, addr, d, workers, warmup, dur,
		params{key: fmt.Sprintf("t1-%s-%d", d.id, round), limit: 1_000_000, period: time.Second, replicas: 1, burst: 1_000_000})
}

// runThroughputAt is runThroughput on the limit p describes (p.rdb is
// filled in).
func runThroughputAt(ctx context.Context, addr string, d design, workers int, warmup, dur time.Duration, p params) (tput, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	p.rdb = rdb
	g, err := d.build(p)
	if err != nil {
		return tput{}, fmt.Errorf("%s: %w", d.name, err)
	}
	// One call first: scripts loaded, connections warm.
	if _, _, err := g.try(ctx); err != nil {
		return tput{}, fmt.Errorf("%s: %w", d.name, err)
	}

	var (
		measuring atomic.Bool
		stop      atomic.Bool
		ops, oks  atomic.Int64
		failed    atomic.Pointer[error]
		wg        sync.WaitGroup
	)
	samples := make([][]int32, workers)
	for w := range workers {
		samples[w] = make([]int32, 0, maxSamplesPerWorker)
	}
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var n, ok int64
			s := samples[w]
			for !stop.Load() {
				t0 := time.Now()
				admitted, _, err := g.try(ctx)
				lat := time.Since(t0)
				if err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
				if measuring.Load() {
					n++
					if admitted {
						ok++
					}
					if len(s) < cap(s) {
						s = append(s, int32(lat/time.Microsecond))
					}
				}
			}
			samples[w] = s
			ops.Add(n)
			oks.Add(ok)
		}()
	}
	time.Sleep(warmup)
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		return tput{}, err
	}
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	rcpu0, err := redisCPU(ctx, admin)
	if err != nil {
		return tput{}, err
	}
	ccpu0 := processCPU()
	start := time.Now()
	measuring.Store(true)
	time.Sleep(dur)
	measuring.Store(false)
	elapsed := time.Since(start)
	ccpu1 := processCPU()
	rcpu1, err := redisCPU(ctx, admin)
	if err != nil {
		return tput{}, err
	}
	runtime.ReadMemStats(&m1)
	usec, err := serverTime(ctx, admin)
	stop.Store(true)
	wg.Wait()
	if err != nil {
		return tput{}, err
	}
	if e := failed.Load(); e != nil {
		return tput{}, fmt.Errorf("%s: %w", d.name, *e)
	}
	all := make([]int32, 0, workers*1000)
	for _, s := range samples {
		all = append(all, s...)
	}
	slices.Sort(all)
	n := ops.Load()
	r := tput{d: d, ops: float64(n) / elapsed.Seconds(), p50: pct(all, 0.50), p99: pct(all, 0.99)}
	if n > 0 {
		r.allocs = float64(m1.Mallocs-m0.Mallocs) / float64(n)
		r.admitted = float64(oks.Load()) / float64(n)
		// Decisions made after the count stopped also ran in Redis before
		// INFO answered: a slight overestimate, alike for every design.
		r.serverUs = usec / float64(n)
		r.clientCPU = float64((ccpu1-ccpu0)/time.Microsecond) / float64(n)
		r.redisCPU = float64((rcpu1-rcpu0)/time.Microsecond) / float64(n)
	}
	return r, nil
}

func pct(sorted []int32, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q * float64(len(sorted)-1))
	return time.Duration(sorted[i]) * time.Microsecond
}

// serverTime sums the microseconds Redis spent in scripts since the last
// CONFIG RESETSTAT (INFO commandstats). Every Redis design here decides in a
// script, and the commands a script calls are counted both on their own and
// inside the script's time: only the script entries are summed.
func serverTime(ctx context.Context, rdb *redis.Client) (float64, error) {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, err
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_eval") {
			continue
		}
		for _, kv := range strings.Split(stats, ",") {
			if v, ok := strings.CutPrefix(kv, "usec="); ok {
				u, _ := strconv.ParseFloat(v, 64)
				total += u
			}
		}
	}
	return total, nil
}

// processCPU is the CPU time this process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// redisCPU is the CPU time the Redis server has used (INFO cpu: its main
// thread and the rest, user and system).
func redisCPU(ctx context.Context, rdb *redis.Client) (time.Duration, error) {
	info, err := rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, err
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (name == "used_cpu_sys" || name == "used_cpu_user") {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	return time.Duration(total * float64(time.Second)), nil
}
