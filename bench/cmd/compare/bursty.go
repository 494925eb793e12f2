package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/rule"
	"github.com/quotaware/throttle/providers/dingtalk/dingtalktest"
)

// Table 6: bursts. A provider allows `limit` calls in any window of
// `window` (a DingTalk group robot's 20 per minute, the window scaled down
// so the run is short). A burst of n calls arrives at once, spread over the
// replicas; each design waits within the budget as its callers would, and
// every granted call is sent to the DingTalk emulator's robot, which counts
// every window of that length and answers 410100 past the limit.

type burstyConfig struct {
	limit    int
	window   time.Duration
	jitter   time.Duration // every design's period is window + jitter
	budget   time.Duration
	replicas int
	sizes    []int
}

type bursty struct {
	d        design
	n        int
	took     time.Duration // from the burst's arrival to its last send
	sent     int
	refused  int // no slot within the budget
	rejected int // 410100 from the emulator
}

// burstyDesigns are the rows of table 6: this project before (paced GCRA)
// and after (sliding window), and the peers that share a limit in Redis.
func burstyDesigns() []design {
	var out []design
	for _, d := range designs() {
		switch d.id {
		case "ours1":
			d.name = "throttle before: paced rule (GCRA, burst 1)"
			out = append(out, d)
			out = append(out, design{
				id: "ourswin", name: "throttle after: window rule (rule.NewWindow)", rules: 1,
				how:   "at most Limit in any Period, exactly; a burst goes at once while the window has room",
				build: newOursWindow,
			})
		case "redisrate", "zset", "fixed":
			out = append(out, d)
		}
	}
	return out
}

func newOursWindow(p params) (gate, error) {
	l, err := limiter.NewShared(p.rdb, limiter.SharedConfig{Prefix: "bench", Mode: limiter.OutageRefuse})
	if err != nil {
		return nil, err
	}
	r, err := rule.NewWindow("api", p.limit, p.period)
	if err != nil {
		return nil, err
	}
	return &ours{l: l, req: limiter.Request{Group: p.key, Rules: []rule.Rule{r}}}, nil
}

func runBursty(ctx context.Context, addr string, d design, bc burstyConfig, n, run int) (bursty, error) {
	emu := dingtalktest.New(dingtalktest.Options{
		RobotLimit: bc.limit, RobotWindow: bc.window,
		TimeScale: 1e9, // a rejection throttles the robot for a moment only: count every one
	})
	defer emu.Close()
	key := fmt.Sprintf("b%d%s%d", run, d.id, time.Now().UnixNano())
	var gates []gate
	for range bc.replicas {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		defer rdb.Close()
		p := params{rdb: rdb, key: key, limit: bc.limit, period: bc.window + bc.jitter, replicas: bc.replicas}
		// One decision on a key of its own first: scripts loaded,
		// connections open, so the burst measures the design alone.
		warm := p
		warm.key += "-warm"
		wg, err := d.build(warm)
		if err != nil {
			return bursty{}, err
		}
		if _, _, err := wg.try(ctx); err != nil {
			return bursty{}, err
		}
		g, err := d.build(p)
		if err != nil {
			return bursty{}, err
		}
		gates = append(gates, g)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	defer client.CloseIdleConnections()
	url := emu.URL + "/robot/send?access_token=bench-" + key

	out := bursty{d: d, n: n}
	var (
		mu   sync.Mutex
		last time.Time
		errs []error
		wg   sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(bc.budget)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			gr, err := gates[i%len(gates)].acquire(ctx, deadline)
			if errors.Is(err, errBudget) {
				mu.Lock()
				out.refused++
				mu.Unlock()
				return
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return
			}
			resp, err := client.Post(url, "application/json", strings.NewReader(`{"msgtype":"text","text":{"content":"alert"}}`))
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			out.sent++
			if gr.sent.After(last) {
				last = gr.sent
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return out, err
	}
	if !last.IsZero() {
		out.took = last.Sub(start)
	}
	out.rejected = emu.Stats().Rejected
	return out, nil
}

func reportBursty(w func(string, ...any), c config, rows []bursty, mline string) {
	bc := c.bursty
	w("## 6. Bursts within a window\n\n")
	w("A provider allows %d calls in any %v (a DingTalk group robot's 20 per minute, scaled down %d× so the\n",
		bc.limit, bc.window, int(time.Minute/bc.window))
	w("run is short). A burst of N calls arrives at once from %d replicas; each design is configured with that\n", bc.replicas)
	w("limit over the window plus %v (the presets' jitter allowance) and waits within a %v budget as its callers\n", bc.jitter, bc.budget)
	w("would; every granted call goes to the DingTalk emulator's robot endpoint, which counts every window of\n")
	w("%v and answers 410100 past %d. _time_ is from the burst's arrival to its last send; _refused_ found no\n", bc.window, bc.limit)
	w("slot within the budget.\n\n%s\n\n", mline)
	w("| design |")
	for _, n := range bc.sizes {
		w(" N=%d: time, sent, refused, 410100 |", n)
	}
	w("\n|---|")
	for range bc.sizes {
		w("---|")
	}
	w("\n")
	var last string
	for _, r := range rows {
		if r.d.id != last {
			if last != "" {
				w("\n")
			}
			w("| %s |", r.d.name)
			last = r.d.id
		}
		w(" %v, %d, %d, **%d** |", r.took.Round(time.Millisecond), r.sent, r.refused, r.rejected)
	}
	w("\n\n")
}

// hotKey is one row of table 6's second part: decisions per second on one
// hot key of a limit that binds, so that after the first Limit nearly every
// decision refuses (reads the state, writes nothing), as in a storm.
type hotKey struct {
	limit  int
	period time.Duration
	paced  tput // this project's paced rule (GCRA, burst 1)
	window tput // this project's window rule
}

func runHotKeys(ctx context.Context, addr string, c config) ([]hotKey, error) {
	var paced, window design
	for _, d := range burstyDesigns() {
		switch d.id {
		case "ours1":
			paced = d
		case "ourswin":
			window = d
		}
	}
	var out []hotKey
	for _, lim := range []struct {
		limit  int
		period time.Duration
	}{{20, time.Minute}, {1000, time.Minute}} {
		h := hotKey{limit: lim.limit, period: lim.period}
		for round := range c.rounds {
			for _, d := range []design{paced, window} {
				p := params{key: fmt.Sprintf("t6-%s-%d-%d", d.id, lim.limit, round), limit: lim.limit, period: lim.period, replicas: 1}
				t, err := runThroughputAt(ctx, addr, d, c.workers, c.tputWarmup, c.tputDur, p)
				if err != nil {
					return nil, err
				}
				best := &h.paced
				if d.id == "ourswin" {
					best = &h.window
				}
				if t.ops > best.ops {
					*best = t
				}
			}
		}
		logf("table 6: hot key %d per %v: paced %.0f decisions/s, window %.0f (%.2f×)", h.limit, h.period, h.paced.ops, h.window.ops, h.window.ops/h.paced.ops)
		out = append(out, h)
	}
	return out, nil
}

func reportHotKeys(w func(string, ...any), c config, rows []hotKey, mline string) {
	w("Decisions per second of one hot key of a binding limit, %d goroutines, coalescing on (the default):\n", c.workers)
	w("after the first Limit nearly every decision refuses, as in a storm. The window rule reads and parses\n")
	w("its log where GCRA reads one number; the target is at least 0.8× GCRA's rate.\n\n%s\n\n", mline)
	w("| limit | paced rule (GCRA): decisions/s, p50, p99 | window rule: decisions/s, p50, p99 | window / paced |\n|---|---|---|---:|\n")
	for _, h := range rows {
		w("| %d per %v | %.0f, %v, %v | %.0f, %v, %v | %.2f× |\n", h.limit, h.period,
			h.paced.ops, h.paced.p50, h.paced.p99, h.window.ops, h.window.p50, h.window.p99, h.window.ops/h.paced.ops)
	}
	w("\n")
}

// keyBytes is a window rule's key size in Redis (MEMORY USAGE).
type keyBytes struct {
	limit        int
	period       time.Duration
	burst, bound int64
}

// runKeyBytes measures a window rule's key for the presets' limits: after
// a burst of Limit at once and Limit more booked a period ahead (at most
// 4000 reservations), and at the hard bound, 128 groups of the widest
// numbers written in the script's format.
func runKeyBytes(ctx context.Context, addr string) ([]keyBytes, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	l, err := limiter.NewShared(rdb, limiter.SharedConfig{Prefix: "bench", Mode: limiter.OutageRefuse})
	if err != nil {
		return nil, err
	}
	var out []keyBytes
	for _, lim := range []struct {
		limit  int
		period time.Duration
	}{{20, time.Minute}, {1000, time.Minute}, {10_000, time.Minute}, {150_000, time.Hour}} {
		kb := keyBytes{limit: lim.limit, period: lim.period}
		r, err := rule.NewWindow("k", lim.limit, lim.period)
		if err != nil {
			return nil, err
		}
		group := fmt.Sprintf("kb%d-%d", lim.limit, time.Now().UnixNano())
		req := limiter.Request{Group: group, Rules: []rule.Rule{r}, MaxWait: lim.period + time.Second}
		for range min(2*lim.limit, 4000) {
			if _, err := l.Reserve(ctx, req); err != nil {
				return nil, err
			}
		}
		if kb.burst, err = rdb.MemoryUsage(ctx, windowKey(group, "k"), 0).Result(); err != nil {
			return nil, err
		}
		parts := []string{strconv.FormatInt(time.Now().UnixMicro(), 10) + ":" + strconv.Itoa(lim.limit)}
		for range 127 {
			parts = append(parts, strconv.FormatInt(lim.period.Microseconds(), 10)+":"+strconv.Itoa(lim.limit))
		}
		key := windowKey(group+"-bound", "k")
		if err := rdb.Set(ctx, key, strings.Join(parts, " "), time.Minute).Err(); err != nil {
			return nil, err
		}
		if kb.bound, err = rdb.MemoryUsage(ctx, key, 0).Result(); err != nil {
			return nil, err
		}
		logf("table 6: window key %d per %v: %d bytes after a burst, at most %d", kb.limit, kb.period, kb.burst, kb.bound)
		out = append(out, kb)
	}
	return out, nil
}

func reportKeyBytes(w func(string, ...any), rows []keyBytes) {
	w("A window rule's Redis key (`MEMORY USAGE`): after a burst of Limit at once and Limit more booked a period\n")
	w("ahead (at most 4000 reservations), and at its hard bound, 128 groups of send times whatever the traffic\n")
	w("(`go test -run '^$' -bench WindowKeyBytes ./limiter/` also measures the log at its most groups under\n")
	w("steady traffic).\n\n")
	w("| limit | bytes after a burst | bytes at most |\n|---|---:|---:|\n")
	for _, k := range rows {
		w("| %d per %v | %d | %d |\n", k.limit, k.period, k.burst, k.bound)
	}
	w("\n")
}

// windowKey is the Redis key of rule key in group under the "bench" prefix,
// in the layout docs/design.md gives ("{prefix:group}:r:key"): the bench
// reads its size with MEMORY USAGE.
func windowKey(group, key string) string { return "{bench:" + group + "}:r:" + key }
