package limiter_test

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/limitertest"
	"github.com/quotaware/throttle/limiter/rule"
)

// parallel50 makes RunParallel use 50 goroutines whatever GOMAXPROCS is.
func parallel50(b *testing.B) {
	b.SetParallelism(max(1, 50/runtime.GOMAXPROCS(0)))
}

// The physical ceiling: one EVALSHA of a script that does nothing but return,
// on one key, from 50 goroutines. One reservation per call cannot beat one
// round trip; coalesced calls reserve many requests each.
func BenchmarkRedisCeilingEvalsha(b *testing.B) {
	c := redistest.Shared(b).Client(b)
	noop := redis.NewScript("return 1")
	ctx := context.Background()
	if err := noop.Load(ctx, c).Err(); err != nil {
		b.Fatal(err)
	}
	keys := []string{"{throttle:bench}:noop"}
	parallel50(b)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := noop.EvalSha(ctx, c, keys).Err(); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func benchRedisReserve(b *testing.B, rules []rule.Rule, scopes []string, opts ...limiter.RedisOption) {
	c := redistest.Shared(b).Client(b)
	l, err := limiter.NewRedis(c, opts...)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	req := limiter.Request{Group: limitertest.Group(b), Rules: rules, Scopes: scopes}
	if _, err := l.Reserve(ctx, req); err != nil {
		b.Fatal(err)
	}
	parallel50(b)
	b.ReportAllocs()
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			res, err := l.Reserve(ctx, req)
			if err != nil || !res.OK() {
				b.Errorf("reserve: %+v %v", res, err)
				return
			}
		}
	})
	b.StopTimer()
	reportCalls(b, c)
}

// hot is a rule far above any load, with a burst so large that requests
// reserved in the same instant (one coalesced call) are all admitted: every
// call runs the whole script including the write.
func hot(key string) rule.Rule {
	return rule.Must(rule.New(key, 1_000_000_000, time.Second, rule.WithBurst(1_000_000)))
}

// One hot key: requests arriving while a call is in flight share the next.
func BenchmarkRedisReserveOneRule(b *testing.B) {
	benchRedisReserve(b, []rule.Rule{hot("hot")}, nil)
}

// One hot key, every reservation its own script call: the cost of one call
// against the ceiling of a call that does nothing.
func BenchmarkRedisReserveOneRuleUncoalesced(b *testing.B) {
	benchRedisReserve(b, []rule.Rule{hot("hot")}, nil, limiter.WithoutCoalescing())
}

// 1,000 rule sets of one group, taken in turn: the traffic of an ISV in
// many orgs, where a request rarely shares its rules with the one before.
// Requests of the group that arrive while a call is in flight share the
// next call whatever their rules; uncoalesced, each makes its own.
func BenchmarkRedisReserveManyRuleSets(b *testing.B) {
	for _, tc := range []struct {
		name string
		opts []limiter.RedisOption
	}{
		{"coalesced", nil},
		{"uncoalesced", []limiter.RedisOption{limiter.WithoutCoalescing()}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			c := redistest.Shared(b).Client(b)
			l, err := limiter.NewRedis(c, tc.opts...)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			group := limitertest.Group(b)
			reqs := make([]limiter.Request, 1000)
			for i := range reqs {
				reqs[i] = limiter.Request{Group: group, Rules: []rule.Rule{hot("api" + strconv.Itoa(i))}}
			}
			var next atomic.Uint64
			parallel50(b)
			b.ReportAllocs()
			if err := c.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req := reqs[next.Add(1)%uint64(len(reqs))]
					res, err := l.Reserve(ctx, req)
					if err != nil || !res.OK() {
						b.Errorf("reserve: %+v %v", res, err)
						return
					}
				}
			})
			b.StopTimer()
			reportCalls(b, c)
		})
	}
}

// What a DingTalk request carries: three rules and three penalty scopes.
func BenchmarkRedisReserveThreeRulesThreeScopes(b *testing.B) {
	benchRedisReserve(b, []rule.Rule{
		hot("api"), hot("app"), hot("egress"),
	}, []string{"api:x", "app:x", "egress:default"})
}

func BenchmarkMemoryReserve(b *testing.B) {
	m := limiter.NewMemory()
	ctx := context.Background()
	req := limiter.Request{Group: "g", Rules: []rule.Rule{rule.Must(rule.New("hot", 1_000_000_000, time.Second))}, MaxWait: time.Minute}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if res, err := m.Reserve(ctx, req); err != nil || !res.OK() {
				b.Errorf("reserve: %+v %v", res, err)
				return
			}
		}
	})
}

func BenchmarkMemoryReserveWindow(b *testing.B) {
	m := limiter.NewMemory()
	ctx := context.Background()
	req := limiter.Request{Group: "g", Rules: []rule.Rule{rule.Must(rule.NewWindow("hot", 1_000_000_000, time.Second))}, MaxWait: time.Minute}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if res, err := m.Reserve(ctx, req); err != nil || !res.OK() {
				b.Errorf("reserve: %+v %v", res, err)
				return
			}
		}
	})
}

// reportCalls reports, from INFO commandstats since the last CONFIG
// RESETSTAT, how many requests each script call served, Redis's time per
// call running it, and the wall time per call. Coalesced, a group's calls
// follow one another, so the wall time is one call's whole cycle: what
// exceeds Redis's time is the round trip (the client, the network, the
// scheduler), during which the group's next call waits.
func reportCalls(b *testing.B, c *redis.Client) {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var calls, usec float64
	for _, line := range strings.Split(info, "\n") {
		stats, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:")
		if !ok {
			continue
		}
		for _, kv := range strings.Split(stats, ",") {
			k, v, _ := strings.Cut(kv, "=")
			f, _ := strconv.ParseFloat(v, 64)
			switch k {
			case "calls":
				calls = f
			case "usec":
				usec = f
			}
		}
	}
	if calls == 0 {
		return
	}
	b.ReportMetric(float64(b.N)/calls, "requests/call")
	b.ReportMetric(usec/calls, "redis-µs/call")
	b.ReportMetric(float64(b.Elapsed().Microseconds())/calls, "wall-µs/call")
}
