package throttle_test

// The soak: eight replicas on one Redis call the DingTalk emulator at five
// times the published rate for THROTTLE_SOAK (e.g. 10s, 60s), with the
// Redis state wiped (FLUSHALL) early on, and the Redis server killed and
// restarted in the middle. It reports violations,
// utilization, added latency, heap and goroutines, and fails on any
// violation (outside the pause after FLUSHALL, outside the outage or in any
// phase of it), on a replica
// exceeding its local share during the outage, on an unexpected error, or
// on goroutines left behind.

import (
	"context"
	"errors"
	"net/http"
	"os"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/internal/loadtest"
	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/limitertest"
	"github.com/quotaware/throttle/providers"
	"github.com/quotaware/throttle/providers/dingtalk"
	"github.com/quotaware/throttle/providers/dingtalk/dingtalktest"
)

// SoakEnv names the variable that enables TestSoak and sets its duration.
const SoakEnv = "THROTTLE_SOAK"

// timedBase is a replica's base transport: it records when each attempt
// was sent and how long the provider took to answer it, so the time the
// Transport added can be told from the provider's.
type timedBase struct {
	base    http.RoundTripper
	replica int

	mu    sync.Mutex
	sends map[string][]time.Time // by folded API
}

type serviceKey struct{}

// serviceTime accumulates the base transport's time over a call's attempts.
type serviceTime struct{ ns atomic.Int64 }

func (b *timedBase) RoundTrip(req *http.Request) (*http.Response, error) {
	began := time.Now()
	b.mu.Lock()
	api := providers.FoldPath(req.URL.Path)
	b.sends[api] = append(b.sends[api], began)
	b.mu.Unlock()
	resp, err := b.base.RoundTrip(req)
	if st, ok := req.Context().Value(serviceKey{}).(*serviceTime); ok {
		st.ns.Add(int64(time.Since(began)))
	}
	return resp, err
}

func (b *timedBase) between(api string, from, to time.Time) []time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []time.Time
	for _, at := range b.sends[api] {
		if !at.Before(from) && at.Before(to) {
			out = append(out, at)
		}
	}
	return out
}

// soakCall is one call as its caller saw it.
type soakCall struct {
	api      string
	answered bool
	ok       bool          // answered without an error code
	added    time.Duration // time in RoundTrip minus the provider's time
	err      error
}

func TestSoak(t *testing.T) {
	spec := os.Getenv(SoakEnv)
	if spec == "" {
		t.Skipf("set %s to a duration (e.g. %s=10s) to run the soak", SoakEnv, SoakEnv)
	}
	run, err := time.ParseDuration(spec)
	if err != nil || run < 5*time.Second {
		t.Fatalf("%s=%q: want a duration of at least 5s", SoakEnv, spec)
	}
	const (
		replicas = 8
		demand   = 5
		maxWait  = time.Second
		probe    = time.Second
		recover  = time.Second
		// After FLUSHALL, new slots wait past the ones booked before (at most
		// MaxWait ahead) plus a period of the rule (1 s).
		flushHold = maxWait + time.Second
	)
	published := float64(dingtalk.Standard.Rate())
	outage := max(3*time.Second, run/10)
	flushAt := run * 15 / 100
	killAt := run * 40 / 100

	srv := redistest.Start(t)
	tg := newDTTarget(t, dingtalktest.Options{LatencyMax: 20 * time.Millisecond})
	if n := dingtalk.Standard.Rate() / replicas; n != 2 {
		t.Fatalf("the local share check assumes 2 calls/s per replica, got %d", n)
	}
	prefix := limitertest.Group(t)
	heapBefore, goBefore := heapInUse(), runtime.NumGoroutine()

	bases := make([]*timedBase, replicas)
	clients := make([]*http.Client, replicas)
	var closers []func()
	for i := range replicas {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
		pool := &http.Transport{MaxIdleConnsPerHost: 64}
		bases[i] = &timedBase{base: pool, replica: i, sends: map[string][]time.Time{}}
		tr := throttle.MustNew(sharedOpt(t, rdb, limiter.SharedConfig{Prefix: prefix, Mode: limiter.OutageLocal, Timeout: 250 * time.Millisecond, Probe: probe, Recover: recover}),
			throttle.WithProfiles(tg.profile(dingtalk.Config{Apps: []dingtalk.App{{}}})), throttle.WithBase(bases[i]),
			throttle.WithMaxWait(maxWait), throttle.WithLogger(quiet), throttle.WithoutTelemetry())
		clients[i] = &http.Client{Transport: tr}
		closers = append(closers, func() {
			tr.Close()
			rdb.Close()
			pool.CloseIdleConnections()
		})
	}
	closeAll := sync.OnceFunc(func() {
		for _, c := range closers {
			c()
		}
	})
	t.Cleanup(closeAll)

	// Fire Poisson arrivals on both APIs from every replica, each call on
	// its own goroutine, until the run ends; calls still waiting then are
	// cancelled.
	start := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // a failure below stops the load too
	paths := []string{dtOldPath, dtNewPath}
	rate := demand * published
	driven := make(chan []soakCall, 1)
	go func() {
		driven <- loadtest.Drive(ctx, replicas, []float64{rate, rate}, func(ctx context.Context, i, api int) soakCall {
			st := &serviceTime{}
			began := time.Now()
			resp, err := tg.call(context.WithValue(ctx, serviceKey{}, st), clients[i], paths[api])
			c := soakCall{api: providers.FoldPath(paths[api]), err: err}
			if err == nil {
				c.answered = true
				c.ok = resp.StatusCode == http.StatusOK
				c.added = time.Since(began) - time.Duration(st.ns.Load())
			}
			return c
		})
	}()

	// Wipe Redis's state, then kill Redis, bring it back empty, and let the
	// run finish.
	waitUntilClock(start.Add(flushAt))
	flushed := time.Now()
	if err := srv.Client(t).FlushAll(context.Background()).Err(); err != nil {
		cancel()
		<-driven
		t.Fatal(err)
	}
	// Every replica counts the others before Redis goes: after the flush
	// the registry fills again as the replicas beat (every 2 s), each
	// counting those that beat before it, and only a beat with all of them
	// present gives a replica its true share. The kill raced that beat.
	registryFull(t, srv.Client(t), prefix, replicas)
	waitUntilClock(start.Add(killAt))
	killed := time.Now()
	srv.Stop()
	waitUntilClock(killed.Add(outage))
	restarting := time.Now()
	if err := srv.Restart(); err != nil {
		cancel()
		<-driven
		t.Fatal(err)
	}
	restarted := time.Now()
	waitUntilClock(start.Add(run))
	cancel()
	calls := <-driven
	end := time.Now()

	// Violations: every answer of the emulator that is not a success, in
	// or out of the outage. The provider counts wall-clock seconds, so the
	// phases end at whole seconds. The outage lasts from the kill until
	// every replica is back on Redis (one probe) and the slots it booked
	// locally have arrived (MaxWait plus the latency).
	const latency = 20 * time.Millisecond
	outageEnd := nextSecond(restarted.Add(probe + recover + maxWait + latency))
	// The pause after FLUSHALL: the slots booked before it still arrive.
	pauseEnd := nextSecond(flushed.Add(flushHold + latency))
	recs := tg.emu.Requests()
	st := tg.emu.Stats()
	// Violations in the outage, by phase: while the slots booked on Redis
	// before the kill still go out next to the local ones (until the end of
	// the second in which the last of them arrives), under the local shares
	// alone, and after the restart, while some replicas are back on Redis
	// and others still on their shares.
	shareFrom := nextSecond(killed.Add(maxWait + latency))
	var violIn, violOut, violSwitch, violLocal, violBack, violFlush int
	okPerAPI := map[string]int{}
	okOutside := map[string]int{}
	for _, r := range recs {
		inOutage := !r.At.Before(killed) && r.At.Before(outageEnd)
		// The provider counts whole seconds: the pause starts with the
		// second of the FLUSHALL.
		inPause := !r.At.Before(flushed.Truncate(time.Second)) && r.At.Before(pauseEnd) && !inOutage
		switch {
		case r.Code != "" && inPause:
			violFlush++
			t.Logf("violation in the pause after FLUSHALL: %s at %v answered %s", r.Path, r.At.Format("15:04:05.000000"), r.Code)
		case r.Code != "":
			if inOutage {
				violIn++
				switch {
				case r.At.Before(shareFrom):
					violSwitch++
					if violSwitch <= 5 {
						t.Errorf("violation while Redis slots and local ones overlap: %s at %v answered %s", r.Path, r.At.Format("15:04:05.000000"), r.Code)
					}
				case r.At.Before(restarting):
					violLocal++
					if violLocal <= 5 {
						t.Errorf("violation under the local shares alone: %s at %v answered %s", r.Path, r.At.Format("15:04:05.000000"), r.Code)
					}
				default:
					violBack++
					if violBack <= 5 {
						t.Errorf("violation after the restart: %s at %v answered %s", r.Path, r.At.Format("15:04:05.000000"), r.Code)
					}
				}
			} else {
				violOut++
				if violOut <= 5 {
					t.Errorf("violation outside the outage: %s at %v answered %s", r.Path, r.At.Format("15:04:05.000000"), r.Code)
				}
			}
		case r.Status == http.StatusOK:
			okPerAPI[r.Path]++ // one path per API in this run
			if !inOutage && !inPause && r.At.Before(end) {
				okOutside[r.Path]++
			}
		}
	}

	// Under the local shares alone, each replica keeps its share: 20/8,
	// cut to 2 per 1.05s, so at most 2 in any second.
	const shareMax = 2
	worstShare := 0
	for i, b := range bases {
		for _, api := range []string{dtOldPath, dtNewPath} {
			sends := b.between(api, shareFrom, restarting)
			most, at := limitertest.MaxInWindow(sends, time.Second)
			worstShare = max(worstShare, most)
			if most > shareMax {
				t.Errorf("replica %d, %s: %d sends in the second from %v during the outage, its share is %d", i, api, most, at.Format("15:04:05.000"), shareMax)
			}
		}
	}

	// Callers' view.
	var answered, okCalls, throttled, penalized, cancelled, other int
	var added []time.Duration
	var firstOther error
	for _, c := range calls {
		switch {
		case c.answered:
			answered++
			added = append(added, c.added)
			if c.ok {
				okCalls++
			}
		case errors.Is(c.err, throttle.ErrThrottled):
			throttled++
		case errors.Is(c.err, throttle.ErrPenalized):
			penalized++
		case errors.Is(c.err, context.Canceled):
			cancelled++
		default:
			other++
			if firstOther == nil {
				firstOther = c.err
			}
		}
	}
	sort.Slice(added, func(i, j int) bool { return added[i] < added[j] })
	pct := func(p float64) time.Duration {
		if len(added) == 0 {
			return 0
		}
		return added[min(len(added)-1, int(p*float64(len(added))))].Round(time.Millisecond)
	}

	// Close everything, then heap and goroutines: back to where they were.
	calls, recs = nil, nil
	closeAll()
	goAfter := runtime.NumGoroutine()
	deadline := time.Now().Add(10 * time.Second)
	for goAfter > goBefore && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond) // connections and timers wind down; poll with a deadline
		goAfter = runtime.NumGoroutine()
	}
	heapAfter := heapInUse()

	elapsed := end.Sub(start)
	// Outside the outage and the pause, as the records are sorted above:
	// before the FLUSHALL's second, between the pause and the kill, and
	// after the outage until the end of the run.
	outsideSecs := flushed.Truncate(time.Second).Sub(start).Seconds()
	if pauseEnd.Before(killed) {
		outsideSecs += killed.Sub(pauseEnd).Seconds()
	}
	if outageEnd.Before(end) {
		outsideSecs += end.Sub(outageEnd).Seconds()
	}
	t.Logf("soak: %d replicas, %v at %d× the published %.0f/s on 2 APIs, latency 0-20ms, MaxWait %v; Redis killed at %v for %v (back on Redis by %v)",
		replicas, run, demand, published, maxWait, killed.Sub(start).Round(time.Millisecond), restarting.Sub(killed).Round(time.Millisecond),
		outageEnd.Sub(start).Round(time.Millisecond))
	t.Logf("FLUSHALL at %v: %d violations in the pause until %v, none allowed after it",
		flushed.Sub(start).Round(time.Millisecond), violFlush, pauseEnd.Sub(start).Round(time.Millisecond))
	t.Logf("violations: %d outside the outage and the pause (target 0), %d during it (%d while Redis slots and local ones overlap, %d under the local shares alone, %d after the restart); emulator: %d requests, %d rejected, %d IP bans",
		violOut, violIn, violSwitch, violLocal, violBack, st.Requests, st.Rejected, st.Bans)
	t.Logf("under the local shares (%v to %v): at most %d sends in any second per replica and API (share %d)",
		shareFrom.Sub(start).Round(time.Millisecond), restarting.Sub(start).Round(time.Millisecond), worstShare, shareMax)
	for _, api := range []string{dtOldPath, dtNewPath} {
		t.Logf("utilization %-26s %.1f%% over the run, %.1f%% outside the outage (%d successes)",
			api, 100*float64(okPerAPI[api])/elapsed.Seconds()/published, 100*float64(okOutside[api])/outsideSecs/published, okPerAPI[api])
	}
	t.Logf("callers: %d calls, %d answered (%d ok), %d throttled, %d penalized, %d cancelled at the end, %d other errors",
		len(added)+throttled+penalized+cancelled+other, answered, okCalls, throttled, penalized, cancelled, other)
	t.Logf("added latency of answered calls (time in RoundTrip minus the provider's; mostly the wait for a slot at 5× demand): p50 %v, p99 %v, max %v",
		pct(0.5), pct(0.99), pct(1))
	t.Logf("heap in use: %.1f MiB before, %.1f MiB after; goroutines: %d before, %d after", mib(heapBefore), mib(heapAfter), goBefore, goAfter)

	if other > 0 {
		t.Errorf("%d calls failed with an unexpected error, e.g. %v", other, firstOther)
	}
	if goAfter > goBefore {
		t.Errorf("%d goroutines after closing everything, %d before", goAfter, goBefore)
	}
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// registryFull returns once every one of n replicas has beaten with all n
// in the registry of prefix (so each counts them all), and fails the test
// after 10 s (five beats).
func registryFull(t *testing.T, c *redis.Client, prefix string, n int) {
	t.Helper()
	ctx := context.Background()
	key := "{" + prefix + ":registry}:replicas"
	var full int64 // Redis's clock (ms) once all n were present
	deadline := time.Now().Add(10 * time.Second)
	for {
		zs, err := c.ZRangeWithScores(ctx, key, 0, -1).Result()
		if err == nil && len(zs) == n {
			if full == 0 {
				now, err := c.Time(ctx).Result()
				if err != nil {
					t.Fatal(err)
				}
				full = now.UnixMilli()
			}
			counted := 0
			for _, z := range zs {
				if int64(z.Score) >= full {
					counted++
				}
			}
			if counted == n {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the registry of %d replicas after the flush: %v %v", n, zs, err)
		}
		time.Sleep(10 * time.Millisecond) // polling the replicas' beats
	}
}

// waitUntilClock blocks until the wall clock reaches at.
func waitUntilClock(at time.Time) {
	if d := time.Until(at); d > 0 {
		<-time.After(d)
	}
}
