package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// callCounter counts every command a client sends (a pipeline counts each
// of its commands), except the handshake go-redis sends on each new
// connection: connections are set up once, not per decision.
type callCounter struct{ n atomic.Int64 }

func handshake(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "hello", "client", "auth", "select":
		return true
	}
	return false
}

func (c *callCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *callCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !handshake(cmd) {
			c.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (c *callCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if !handshake(cmd) {
				c.n.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

// contention is one design's behaviour with many waiters on a slow rule.
type contention struct {
	d              design
	admitted       int
	rate           float64 // admitted per second
	callsPerAdmit  float64
	longestWait    time.Duration
	inversions     int     // pairs admitted out of arrival order
	inversionShare float64 // inversions / pairs
	waited         int     // grants that had to wait for a later slot
	late50, late99 time.Duration
	mem            memUse
}

// memUse is the Redis memory one limit's state takes.
type memUse struct {
	keys  int
	bytes int64
}

// inversionMargin is how far apart two asks must be for their order to
// count: one slot of the contended 20/s rule. Closer asks are taken as
// simultaneous, since the order they reach Redis in is then a matter of
// goroutine scheduling on a busy machine.
const inversionMargin = 50 * time.Millisecond

type admission struct {
	start time.Time
	gr    grant
}

// runContention runs `waiters` goroutines, each acquiring a slot of a
// `limit`/s rule over and over for dur, then measures the rule's memory.
func runContention(ctx context.Context, addr string, d design, waiters, limit int, dur time.Duration) (contention, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: waiters + 8})
	defer rdb.Close()
	calls := &callCounter{}
	rdb.AddHook(calls)
	key := "t2-" + d.id + "-" + strconv.FormatInt(time.Now().UnixNano()%1e6, 36)
	g, err := d.build(params{rdb: rdb, key: key, limit: limit, period: time.Second, replicas: 1})
	if err != nil {
		return contention{}, fmt.Errorf("%s: %w", d.name, err)
	}
	// Warm connections and scripts outside the count, on another key.
	if w, err := d.build(params{rdb: rdb, key: key + "-warm", limit: 1000, period: time.Second, replicas: 1}); err == nil {
		for range 8 {
			_, _, _ = w.try(ctx)
		}
	}
	calls.n.Store(0)

	// Waiters ask for dur; every ask is then served, however long it waits:
	// no refusal at the end of the run skews the count.
	start := time.Now()
	stopAsking := start.Add(dur)
	deadline := stopAsking.Add(time.Duration(waiters+limit)*time.Second/time.Duration(limit) + 5*time.Second)
	var (
		mu   sync.Mutex
		adm  []admission
		errs []error
		wg   sync.WaitGroup
	)
	for range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				t0 := time.Now()
				if !t0.Before(stopAsking) {
					return
				}
				gr, err := g.acquire(ctx, deadline)
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				mu.Lock()
				adm = append(adm, admission{start: t0, gr: gr})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return contention{}, fmt.Errorf("%s: %w", d.name, errs[0])
	}
	c := contention{d: d, admitted: len(adm)}
	c.rate = float64(len(adm)) / time.Since(start).Seconds()
	if len(adm) > 0 {
		c.callsPerAdmit = float64(calls.n.Load()) / float64(len(adm))
	}
	var late []int32
	for i, a := range adm {
		c.longestWait = max(c.longestWait, a.gr.sent.Sub(a.start))
		if a.gr.waited {
			late = append(late, int32(a.gr.sent.Sub(a.gr.scheduled)/time.Microsecond))
		}
		for _, b := range adm[i+1:] {
			// Asks closer than inversionMargin are taken as simultaneous:
			// the order they reach Redis in is a matter of scheduling.
			if a.start.Add(inversionMargin).Before(b.start) && a.gr.sent.After(b.gr.sent) ||
				b.start.Add(inversionMargin).Before(a.start) && b.gr.sent.After(a.gr.sent) {
				c.inversions++
			}
		}
	}
	if n := len(adm); n > 1 {
		c.inversionShare = float64(c.inversions) / float64(n*(n-1)/2)
	}
	slices.Sort(late)
	c.waited = len(late)
	c.late50, c.late99 = pct(late, 0.5), pct(late, 0.99)
	if !d.local {
		c.mem, err = memoryOf(ctx, rdb, key)
		if err != nil {
			return c, err
		}
	}
	return c, nil
}

// memoryOf sums MEMORY USAGE over every key holding the limit's state.
func memoryOf(ctx context.Context, rdb *redis.Client, key string) (memUse, error) {
	var m memUse
	iter := rdb.Scan(ctx, 0, "*"+key+"*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		if strings.Contains(k, "-warm") {
			continue
		}
		n, err := rdb.MemoryUsage(ctx, k, 0).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return m, err
		}
		m.keys++
		m.bytes += n
	}
	return m, iter.Err()
}
