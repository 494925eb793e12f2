package main

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The GCRA floor: the least a limiter that decides in Redis on Redis's
// clock can do for one decision, a script that reads the time, reads the
// key, decides and writes the key back, with nothing else (no penalties,
// no epoch, no reply beyond yes or no). Table 11 runs it beside redis_rate
// to show how far any such script can get ahead of redis_rate's on this
// machine; it is not a limiter to use.

var floorScript = redis.NewScript(`
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
if tat - now > tonumber(ARGV[2]) then return 0 end
redis.call('SET', KEYS[1], string.format('%d', tat + ARGV[1]), 'PX', ARGV[3])
return 1
`)

func floorDesign() design {
	return design{
		id: "floor", name: "GCRA floor: TIME, GET, SET", rules: 1, throughputOnly: true,
		how:   "one EVALSHA of a bare GCRA on Redis's clock (TIME, GET, decide, SET), integer µs, nothing else",
		build: newFloor,
	}
}

type floor struct {
	rdb  *redis.Client
	keys [][]string
	seq  atomic.Uint64
	args []any // T µs, tolerance µs, key TTL ms
}

func newFloor(p params) (gate, error) {
	if err := floorScript.Load(context.Background(), p.rdb).Err(); err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	t := p.period.Microseconds() / int64(p.limit)
	tol := t * int64(max(1, p.burst)-1)
	f := &floor{rdb: p.rdb, args: []any{strconv.FormatInt(t, 10), strconv.FormatInt(tol, 10),
		strconv.FormatInt((t+tol)/1000+1, 10)}}
	for _, k := range append([]string{p.key}, manyKeys(p)...) {
		f.keys = append(f.keys, []string{"floor:{" + k + "}"})
	}
	if len(f.keys) > 1 {
		f.keys = f.keys[1:]
	}
	return f, nil
}

func (f *floor) try(ctx context.Context) (bool, time.Duration, error) {
	n, err := floorScript.EvalSha(ctx, f.rdb, f.keys[next(&f.seq, len(f.keys))], f.args...).Int()
	return n == 1, 0, err
}

func (f *floor) acquire(ctx context.Context, deadline time.Time) (grant, error) {
	return pollAcquire(ctx, f, deadline)
}
