package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle/bench/internal/redisproc"
)

type config struct {
	out, docs string

	workers       int
	tputWarmup    time.Duration
	tputDur       time.Duration
	rounds        int
	waiters       int
	contLimit     int
	contDur       time.Duration
	fid           fidelityConfig
	bursty        burstyConfig
	only          string
	quick         bool
	commandString string
}

func main() {
	var c config
	flag.StringVar(&c.out, "out", "../BENCHMARKS.md", "Markdown report to write")
	flag.StringVar(&c.docs, "docs", "../docs", "directory for the PNG charts")
	flag.IntVar(&c.workers, "workers", 50, "goroutines deciding at once (table 1)")
	flag.DurationVar(&c.tputDur, "throughput", 1500*time.Millisecond, "measured time per design and round (table 1)")
	flag.IntVar(&c.rounds, "rounds", 2, "interleaved rounds of table 1; the best round of each design is kept")
	flag.IntVar(&c.waiters, "waiters", 64, "waiters on one rule (table 2)")
	flag.IntVar(&c.contLimit, "contention-limit", 20, "the contended rule's limit per second (table 2)")
	flag.DurationVar(&c.contDur, "contention", 5*time.Second, "length of the contention run (table 2)")
	flag.IntVar(&c.fid.replicas, "replicas", 4, "replicas sharing the limit (table 3)")
	flag.IntVar(&c.fid.limit, "limit", 20, "the emulator's per-API limit per second (table 3)")
	flag.IntVar(&c.fid.demandX, "demand", 5, "demand as a multiple of the limit (table 3)")
	flag.DurationVar(&c.fid.dur, "fidelity", 15*time.Second, "length of each fidelity run (table 3)")
	flag.BoolVar(&c.fid.parallel, "parallel-fidelity", false, "run the fidelity rows at once rather than one after another (table 3)")
	flag.DurationVar(&c.fid.budget, "budget", 2*time.Second, "longest a call may wait for a slot (table 3)")
	flag.DurationVar(&c.fid.latMax, "latency", 20*time.Millisecond, "emulated latency is uniform in [0, this] (table 3)")
	flag.DurationVar(&c.fid.skew, "skew", 200*time.Millisecond, "replicas' clocks spread over ±this in the skew runs (table 3)")
	flag.StringVar(&c.only, "only", "", "run only these tables, e.g. 1,3 (the report then covers those alone)")
	flag.BoolVar(&c.quick, "quick", false, "short runs for a smoke test")
	flag.Parse()
	c.bursty = burstyConfig{limit: 20, window: 2 * time.Second, jitter: 50 * time.Millisecond,
		budget: 5 * time.Second, replicas: 4, sizes: []int{6, 12, 20, 40}}
	c.tputWarmup = 300 * time.Millisecond
	if c.quick {
		c.tputDur, c.rounds, c.contDur, c.fid.dur = 500*time.Millisecond, 1, 2*time.Second, 5*time.Second
	}
	c.commandString = "make bench-compare"
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(1)
	}
}

func (c *config) want(table int) bool {
	if c.only == "" {
		return true
	}
	for _, f := range strings.Split(c.only, ",") {
		if strings.TrimSpace(f) == fmt.Sprint(table) {
			return true
		}
	}
	return false
}

type results struct {
	machine    machine
	tput       []tput
	contention []contention
	fidelity   []fidelity
	bursty     []bursty
	hotKeys    []hotKey
	keyBytes   []keyBytes
	keyCurve   []keyPoint
	repeats    []repeatRun
	scale      string // tables 8 to 10, as Markdown (scaletables.go)
	scaleRows  scaleRows
}

func run(c config) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	srv, err := redisproc.Start()
	if err != nil {
		return err
	}
	defer srv.Stop()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()

	var res results
	res.machine, err = describeMachine(ctx, rdb)
	if err != nil {
		return err
	}
	logf("machine: %s", res.machine)
	began := time.Now()
	ds := designs()

	if c.want(1) {
		best := map[string]tput{}
		for round := range c.rounds {
			for _, d := range ds {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				t, err := runThroughput(ctx, srv.Addr, d, c.workers, c.tputWarmup, c.tputDur, round)
				if err != nil {
					return err
				}
				logf("table 1 round %d: %-32s %9.0f ops/s  p50 %v  p99 %v  %.1f allocs  %.1f µs in Redis", round+1, d.name, t.ops, t.p50, t.p99, t.allocs, t.serverUs)
				if b, ok := best[d.id]; !ok || t.ops > b.ops {
					best[d.id] = t
				}
			}
		}
		ceil := best["ceiling"].ops
		for _, d := range ds {
			t := best[d.id]
			if ceil > 0 {
				t.ratio = t.ops / ceil
			}
			res.tput = append(res.tput, t)
		}
	}

	if c.want(2) || c.want(4) || c.want(5) {
		for _, d := range ds {
			if d.ceiling || d.throughputOnly {
				continue
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			r, err := runContention(ctx, srv.Addr, d, c.waiters, c.contLimit, c.contDur)
			if err != nil {
				return err
			}
			logf("table 2: %-32s %4d admitted  %.2f calls/admit  longest %v  inversions %d  late p50 %v p99 %v  mem %d B in %d keys",
				d.name, r.admitted, r.callsPerAdmit, r.longestWait.Round(time.Millisecond), r.inversions, r.late50, r.late99, r.mem.bytes, r.mem.keys)
			res.contention = append(res.contention, r)
		}
	}

	if c.want(3) {
		// One row at a time by default: the polling designs load the two
		// cores enough to delay everyone's timers when run together.
		type job struct {
			d      design
			skewed bool
		}
		var jobs []job
		for _, skewed := range []bool{false, true} {
			for _, d := range ds {
				if d.ceiling || d.throughputOnly || skewed && !d.clientClock {
					continue
				}
				jobs = append(jobs, job{d, skewed})
			}
		}
		out := make([]fidelity, len(jobs))
		errs := make([]error, len(jobs))
		var wg sync.WaitGroup
		logf("table 3: %d runs of %v (parallel: %v)", len(jobs), c.fid.dur, c.fid.parallel)
		for i, j := range jobs {
			wg.Add(1)
			f := func() {
				defer wg.Done()
				out[i], errs[i] = runFidelity(ctx, srv.Addr, j.d, c.fid, j.skewed, i)
			}
			if c.fid.parallel {
				go f()
			} else {
				f()
			}
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return err
		}
		for _, f := range out {
			logf("table 3: %-32s skew=%v sent %d rejected %d ok %d share %.1f%% over-seconds %d ban %v calls/sent %.2f",
				f.d.name, f.skew, f.sent, f.rejected, f.ok, 100*f.share, f.overSeconds, f.banned, f.callsPerSent)
		}
		res.fidelity = out
	}
	if c.want(6) {
		run := 0
		for _, d := range burstyDesigns() {
			for _, n := range c.bursty.sizes {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				r, err := runBursty(ctx, srv.Addr, d, c.bursty, n, run)
				if err != nil {
					return err
				}
				run++
				logf("table 6: %-50s N=%-3d took %v sent %d refused %d rejected %d", d.name, n, r.took.Round(time.Millisecond), r.sent, r.refused, r.rejected)
				res.bursty = append(res.bursty, r)
			}
		}
		if res.hotKeys, err = runHotKeys(ctx, srv.Addr, c); err != nil {
			return err
		}
		if res.keyBytes, err = runKeyBytes(ctx, srv.Addr); err != nil {
			return err
		}
	}

	if c.want(7) {
		if res.keyCurve, err = runKeyCurve(ctx, srv.Addr, c); err != nil {
			return err
		}
	}
	if c.want(11) {
		if res.repeats, err = runRepeats(ctx, srv.Addr, c); err != nil {
			return err
		}
	}
	if c.want(8) || c.want(9) || c.want(10) {
		if res.scale, err = scaleReport(ctx, c, srv.Addr, fmt.Sprintf("_Machine: %s._", res.machine), &res.scaleRows); err != nil {
			return err
		}
	}

	logf("measured in %v", time.Since(began).Round(time.Second))

	if err := os.MkdirAll(c.docs, 0o755); err != nil {
		return err
	}
	charts, err := drawCharts(c, res)
	if err != nil {
		return err
	}
	md := report(c, res, charts, filepath.Dir(c.out))
	if err := os.WriteFile(c.out, []byte(md), 0o644); err != nil {
		return err
	}
	logf("wrote %s and %d charts in %s", c.out, len(charts), c.docs)
	return nil
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+format+"\n", args...)
}
