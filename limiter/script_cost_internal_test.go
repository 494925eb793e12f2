package limiter

import (
	"context"
	"testing"
	"time"

	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter/rule"
	"github.com/redis/go-redis/v9"
)

// What the one-call path costs Redis, piece by piece: Redis's own time per
// call for one request of one paced rule (INFO commandstats, so the
// client's load does not count): one.lua with the epoch marker lazy (the
// common call) or read, the same request through reserve.lua's general
// loop, that loop without the epoch marker, and scripts that make only the
// calls into Redis a GCRA needs, or nothing at all with the same arguments.
// The differences say what each part costs on the common path.
func BenchmarkRedisScriptCost(b *testing.B) {
	srv := redistest.Start(b)
	c := srv.Client(b)
	l, err := newRedis(c)
	if err != nil {
		b.Fatal(err)
	}
	req := Request{Group: "cost", Rules: []rule.Rule{rule.Must(rule.New("api", 1_000_000_000, time.Second, rule.WithBurst(1_000_000)))}}
	keys := l.appendSegmentKeys(nil, &req, true)
	args, _ := appendSegmentArgs(nil, []Request{req}, true)
	// one.lua's arguments: the common call has no slot booked ahead, so the
	// marker is read only if the request waits, which it does not here.
	var one [2]scriptArgs
	l.appendOne(&one[0], []Request{req}, false)
	l.appendOne(&one[1], []Request{req}, true)
	lazy, read := one[0].list[3+len(keys):], one[1].list[3+len(keys):]
	noMarker := append([]any(nil), args...)
	noMarker[1] = "0"
	floor := "local t = redis.call('TIME') local v = redis.call('GET', KEYS[1]) " +
		"redis.call('SET', KEYS[1], '1764000000000000', 'PX', 1001) return 1"
	floorMGET := "local t = redis.call('TIME') local v = redis.call('MGET', KEYS[1], KEYS[2]) " +
		"redis.call('SET', KEYS[2], '1764000000000000', 'PX', 1001) return 1"
	for _, v := range []struct {
		name, src  string
		keys, args []any
	}{
		{"one.lua, the marker lazy", oneSource, keys, lazy},
		{"one.lua, the marker read", oneSource, keys, read},
		{"reserve.lua", reserveSource, keys, args},
		{"reserve.lua without the epoch marker", reserveSource, keys[1:], noMarker},
		{"TIME GET SET", floor, keys[1:], nil},
		{"TIME MGET(2) SET", floorMGET, keys, nil},
		{"return 1, the same arguments", "return 1", keys, lazy},
		{"return 1, no arguments", "return 1", nil, nil},
	} {
		b.Run(v.name, func(b *testing.B) { benchScriptCost(b, c, v.src, v.keys, v.args) })
	}
}

func benchScriptCost(b *testing.B, c *redis.Client, src string, keys, args []any) {
	ctx := context.Background()
	sha, err := c.ScriptLoad(ctx, src).Result()
	if err != nil {
		b.Fatal(err)
	}
	call := append([]any{"evalsha", sha, len(keys)}, keys...)
	call = append(call, args...)
	if err := c.Do(ctx, call...).Err(); err != nil && err != redis.Nil {
		b.Fatal(err)
	}
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	// The calls go in pipelines of up to 100, so that Redis runs them
	// back to back: one call at a time, each waits on the round trip and
	// Redis's CPU idles between them, which makes the time a call takes
	// swing with how deeply the CPU slept (10-13 µs for what takes 5-6 in
	// a busy Redis, the state under load).
	b.ResetTimer()
	for left := b.N; left > 0; left -= 100 {
		p := c.Pipeline()
		for range min(left, 100) {
			p.Do(ctx, call...)
		}
		if _, err := p.Exec(ctx); err != nil && err != redis.Nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(perCall(info, "cmdstat_evalsha"), "redis-µs/call")
}
