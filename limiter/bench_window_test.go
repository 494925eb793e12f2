package limiter_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/limitertest"
	"github.com/quotaware/throttle/limiter/rule"
)

// Sliding-window rules beside GCRA on one hot key: 50 goroutines asking
// for a slot with no wait allowed, so after the first Limit nearly every
// decision is a refusal that reads the state and writes nothing, as under
// an alert storm. Coalesced (the default): requests arriving while a call
// is in flight share the next. Compare ns/op of the Window and Paced lines
// of one limit:
//
//	go test -run '^$' -bench 'HotKey' -benchmem ./limiter/
func BenchmarkRedisHotKey(b *testing.B) {
	for _, tc := range []struct {
		limit  int
		period time.Duration
	}{{20, time.Minute}, {1000, time.Minute}} {
		for _, kind := range []string{"Paced", "Window"} {
			b.Run(fmt.Sprintf("%d per %v/%s", tc.limit, tc.period, kind), func(b *testing.B) {
				var r rule.Rule
				if kind == "Window" {
					r = rule.Must(rule.NewWindow("hot", tc.limit, tc.period))
				} else {
					r = rule.Must(rule.New("hot", tc.limit, tc.period))
				}
				benchDecisions(b, r, nil)
			})
		}
	}
	// The window rule's costliest state: a log at its 128 groups (steady
	// traffic over the whole period), which every decision parses.
	b.Run("1000 per 1m0s/WindowFullLog", func(b *testing.B) {
		r := rule.Must(rule.NewWindow("hot", 1000, time.Minute))
		benchDecisions(b, r, func(c redis.UniversalClient, key string) {
			setLog(b, c, key, 128, time.Minute/128, 1000/128+1)
		})
	})
}

func benchDecisions(b *testing.B, r rule.Rule, fill func(c redis.UniversalClient, key string)) {
	c := redistest.Shared(b).Client(b)
	l, err := limiter.NewRedis(c)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	req := limiter.Request{Group: limitertest.Group(b), Rules: []rule.Rule{r}}
	if fill != nil {
		fill(c, l.RuleKey(req.Group, r.Key()))
	}
	// Fill the window as a burst would: Limit sends at once.
	for range r.Limit() {
		if _, err := l.Reserve(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	parallel50(b)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := l.Reserve(ctx, req); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// The bytes a window rule's key takes in Redis (MEMORY USAGE), for the
// limits of the presets: after a burst of Limit at once and Limit more
// booked a period ahead (at most 4000 reservations: "burst"), after sends
// spread evenly over the period so that the log holds as many groups as it
// can (128, or 2×Limit for an exact log: "spread"), and at the hard bound:
// 128 groups of the widest numbers, whatever the traffic.
//
//	go test -run '^$' -bench 'WindowKeyBytes' ./limiter/
func BenchmarkWindowKeyBytes(b *testing.B) {
	c := redistest.Shared(b).Client(b)
	ctx := context.Background()
	for _, tc := range []struct {
		limit  int
		period time.Duration
	}{{20, time.Minute}, {1000, time.Minute}, {10_000, time.Minute}, {150_000, time.Hour}} {
		b.Run(fmt.Sprintf("%d per %v", tc.limit, tc.period), func(b *testing.B) {
			r := rule.Must(rule.NewWindow("k", tc.limit, tc.period))
			l, err := limiter.NewRedis(c)
			if err != nil {
				b.Fatal(err)
			}
			usage := func(group string) float64 {
				n, err := c.MemoryUsage(ctx, l.RuleKey(group, "k"), 0).Result()
				if err != nil {
					b.Fatal(err)
				}
				return float64(n)
			}
			var burst, spread, bound float64
			for range b.N {
				// A burst of Limit now and Limit more booked a period ahead.
				g := limitertest.Group(b)
				req := limiter.Request{Group: g, Rules: []rule.Rule{r}, MaxWait: tc.period + time.Second}
				for range min(2*tc.limit, 4000) {
					if _, err := l.Reserve(ctx, req); err != nil {
						b.Fatal(err)
					}
				}
				burst = usage(g)
				// One send in each of 128 slices of the period: the log
				// as it looks under steady traffic, written directly in
				// the script's format.
				g = limitertest.Group(b)
				groups := min(128, 2*tc.limit)
				setLog(b, c, l.RuleKey(g, "k"), groups, tc.period/time.Duration(groups), max(1, tc.limit/groups))
				spread = usage(g)
				// The hard bound: 128 groups, each delta a whole period and
				// each count the whole limit.
				g = limitertest.Group(b)
				setLog(b, c, l.RuleKey(g, "k"), 128, tc.period, tc.limit)
				bound = usage(g)
			}
			b.ReportMetric(burst, "bytes/burst")
			b.ReportMetric(spread, "bytes/spread")
			b.ReportMetric(bound, "bytes/bound")
		})
	}
}

// setLog writes a window log of n groups, delta apart, count sends each,
// in the format reserve.lua writes.
func setLog(b *testing.B, c redis.UniversalClient, key string, n int, delta time.Duration, count int) {
	parts := []string{strconv.FormatInt(time.Now().UnixMicro(), 10) + ":" + strconv.Itoa(count)}
	for range n - 1 {
		parts = append(parts, strconv.FormatInt(delta.Microseconds(), 10)+":"+strconv.Itoa(count))
	}
	if err := c.Set(context.Background(), key, strings.Join(parts, " "), time.Minute).Err(); err != nil {
		b.Fatal(err)
	}
}
