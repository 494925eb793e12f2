package limiter

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter/rule"
	"github.com/redis/go-redis/v9"
)

// The longest a coalesced call holds Redis: each iteration reserves the
// largest batch in one call, maxBatch requests of distinct rule sets of one
// group, each with three paced rules (one shared by all, as an app's rule
// is) and three penalty scopes; "long keys" makes every key as long as a key
// may be, up to the batch's byte bound. The metrics are Redis's own times
// for the script (SLOWLOG with every command logged, and INFO
// commandstats), so the client's load does not count.
func BenchmarkRedisLargestBatch(b *testing.B) {
	b.Run("short keys", func(b *testing.B) { benchLargestBatch(b, 0, false) })
	b.Run("long keys", func(b *testing.B) { benchLargestBatch(b, 200, false) })
	// For comparison: one paced rule per request, distinct (a segment
	// per request) or the same (one segment).
	b.Run("one rule each", func(b *testing.B) { benchLargestBatch(b, 0, true) })
}

// BenchmarkRedisOneSegment is a full batch of one rule set: one segment.
func BenchmarkRedisOneSegment(b *testing.B) { benchLargestBatch(b, -1, true) }

func benchLargestBatch(b *testing.B, keyLen int, single bool) {
	srv := redistest.Start(b)
	c := srv.Client(b)
	ctx := context.Background()
	l, err := newRedis(c)
	if err != nil {
		b.Fatal(err)
	}
	pad := strings.Repeat("k", max(0, keyLen))
	hot := func(key string) rule.Rule {
		return rule.Must(rule.New(key+pad, 1_000_000_000, time.Second, rule.WithBurst(1_000_000)))
	}
	app := hot("app")
	var reqs []Request
	var size callBytes
	for i := range maxBatch {
		r := Request{Group: "dingtalk", Rules: []rule.Rule{hot("api" + strconv.Itoa(i)), app, hot("egress" + strconv.Itoa(i))},
			Scopes: []string{"api:" + strconv.Itoa(i) + pad, "app" + pad, "egress:" + strconv.Itoa(i) + pad}}
		switch {
		case single && keyLen < 0:
			r = Request{Group: "dingtalk", Rules: []rule.Rule{app}}
		case single:
			r = Request{Group: "dingtalk", Rules: []rule.Rule{hot("api" + strconv.Itoa(i))}}
		}
		var prev *Request
		if len(reqs) > 0 {
			prev = &reqs[len(reqs)-1]
		}
		if size = size.with(&r, prev, l.prefix); size.size() > maxBatchBytes {
			break
		}
		reqs = append(reqs, r)
	}
	out := make([]Reservation, len(reqs))
	if err := l.reserveN(ctx, reqs, out); err != nil {
		b.Fatal(err)
	}
	for _, cmd := range [][]any{{"config", "set", "slowlog-log-slower-than", "0"}, {"config", "set", "slowlog-max-len", "100000"},
		{"slowlog", "reset"}, {"config", "resetstat"}} {
		if err := c.Do(ctx, cmd...).Err(); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for range b.N {
		if err := l.reserveN(ctx, reqs, out); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	longest, err := slowest(ctx, c)
	if err != nil {
		b.Fatal(err)
	}
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(len(reqs)), "requests/call")
	b.ReportMetric(float64(longest), "longest-µs")
	b.ReportMetric(perCall(info, "cmdstat_evalsha"), "mean-µs")
}

// slowest is the longest command in Redis's SLOWLOG (µs).
func slowest(ctx context.Context, c *redis.Client) (int64, error) {
	logs, err := c.SlowLogGet(ctx, -1).Result()
	if err != nil {
		return 0, err
	}
	var most time.Duration
	for _, l := range logs {
		most = max(most, l.Duration)
	}
	return most.Microseconds(), nil
}

// perCall reads a command's mean time (µs) from INFO commandstats.
func perCall(info, name string) float64 {
	for _, line := range strings.Split(info, "\n") {
		if stats, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			for _, kv := range strings.Split(stats, ",") {
				if v, ok := strings.CutPrefix(kv, "usec_per_call="); ok {
					f, _ := strconv.ParseFloat(v, 64)
					return f
				}
			}
		}
	}
	panic(fmt.Sprintf("no %s in %q", name, info))
}
