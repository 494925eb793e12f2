package main

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	ulule "github.com/ulule/limiter/v3"
	ulredis "github.com/ulule/limiter/v3/drivers/store/redis"
	"golang.org/x/time/rate"

	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/rule"
)

// A design is one way to share a limit of `limit` calls per `period`.
// build returns one replica's limiter.
type design struct {
	id   string // short, used in keys and file names
	name string // as shown in tables
	how  string // how it is configured and how a waiting caller waits
	// clientClock is set when decisions depend on the replica's clock.
	clientClock bool
	// local is set for limiters that keep their state in-process.
	local bool
	// ceiling marks the no-logic reference: it never refuses.
	ceiling bool
	// rules is how many rules one decision charges.
	rules int
	// throughputOnly rows appear in table 1 alone: they differ from
	// another row of this project only in what table 1 measures.
	throughputOnly bool
	build          func(p params) (gate, error)
}

// params describe one replica's limiter.
type params struct {
	rdb      *redis.Client
	key      string
	limit    int
	period   time.Duration
	replicas int
	skew     time.Duration // added to the replica's clock
	// burst is the burst of designs that take one (0: 1). Table 1 sets it
	// to the limit, as redis_rate.PerSecond does, so requests decided in
	// the same instant all admit.
	burst int
	// keys is how many distinct keys (this project: rule sets of one
	// group) the decisions go to in turn (0: 1), for the designs that
	// support it (keyCurve).
	keys int
}

// next returns the index of the next key among n, in turn.
func next(seq *atomic.Uint64, n int) int {
	if n <= 1 {
		return 0
	}
	return int(seq.Add(1) % uint64(n))
}

// gate is one replica's limiter.
type gate interface {
	// try makes one decision that sends now or not; when not, wait is how
	// long the limiter advises to wait before asking again.
	try(ctx context.Context) (ok bool, wait time.Duration, err error)
	// acquire blocks until a call may go or the deadline cannot be met.
	acquire(ctx context.Context, deadline time.Time) (grant, error)
}

// grant is the outcome of acquire.
type grant struct {
	ok bool
	// waited is set when the caller had to wait for a later slot.
	waited bool
	// scheduled is when the limiter said the slot opens; sent is when the
	// caller was released to send.
	scheduled, sent time.Time
}

var errBudget = errors.New("no slot within the budget")

// pollAcquire is how a caller waits on a reject-only limiter: sleep the
// advised wait, ask again.
func pollAcquire(ctx context.Context, g gate, deadline time.Time) (grant, error) {
	var gr grant
	for {
		ok, wait, err := g.try(ctx)
		now := time.Now()
		if err != nil {
			return gr, err
		}
		if ok {
			gr.ok, gr.sent = true, now
			if !gr.waited {
				gr.scheduled = now
			}
			return gr, nil
		}
		if now.Add(wait).After(deadline) {
			return gr, errBudget
		}
		gr.waited, gr.scheduled = true, now.Add(wait)
		if err := sleep(ctx, wait); err != nil {
			return gr, err
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func designs() []design {
	return []design{
		{
			id: "ours1", name: "throttle, 1 rule", rules: 1,
			how: "limiter.NewShared, GCRA in one script (Redis TIME); a waiting caller books its slot and sleeps once; " +
				"requests of one group that arrive while calls are in flight share the next call (coalescing, the default; " +
				"two calls in flight when they book no rule in common)",
			build: func(p params) (gate, error) { return newOurs(p, 1, false) },
		},
		{
			id: "ours1single", name: "throttle, 1 rule, one call each", rules: 1, throughputOnly: true,
			how:   "as above with SharedConfig.NoCoalescing: every decision is its own script call",
			build: func(p params) (gate, error) { return newOurs(p, 1, true) },
		},
		{
			id: "ours3", name: "throttle, 3 rules + 3 scopes", rules: 3, throughputOnly: true,
			how:   "limiter.NewShared: three paced rules and three penalty keys checked and charged in one script call (a DingTalk request)",
			build: func(p params) (gate, error) { return newOurs(p, 3, false) },
		},
		{
			id: "redisrate", name: "go-redis/redis_rate v10", rules: 1,
			how:   "GCRA, reject only, redis_rate.PerSecond(limit) (its burst equals the rate); a waiting caller sleeps RetryAfter and asks again",
			build: newRedisRate,
		},
		{
			id: "ulule", name: "ulule/limiter v3 (Redis store)", rules: 1,
			how:   "fixed window started by the first call (INCRBY + PEXPIRE script); a waiting caller sleeps until Reset (whole seconds, at least 10 ms) and asks again",
			build: newUlule,
		},
		{
			id: "zset", name: "sorted-set log (Redisson-style)", rules: 1, clientClock: true,
			how:   "one sorted-set member per grant scored by the client's clock, expired grants summed back; the client re-polls after the returned delay",
			build: newZset,
		},
		{
			id: "fixed", name: "fixed window INCR + EXPIRE", rules: 1, clientClock: true,
			how:   "the tutorial limiter: key per window of the client's clock, INCR, PEXPIRE on the first call; a refused caller sleeps to the next window",
			build: newFixed,
		},
		{
			id: "xrate", name: "x/time/rate per replica", rules: 1, local: true,
			how:   "golang.org/x/time/rate.NewLimiter(limit/replicas, burst 1) in each replica, no Redis; Reserve then sleep",
			build: newXRate,
		},
		{
			id: "ceiling", name: "ceiling: EVALSHA `return 1`", rules: 1, ceiling: true,
			how:   "one EVALSHA of a script that only returns, on one key: one round trip, no logic",
			build: newCeiling,
		},
	}
}

// ---- this project ----

type ours struct {
	l    *limiter.Shared
	req  limiter.Request
	reqs []limiter.Request // with params.keys > 1: one rule set per key
	seq  atomic.Uint64
}

func newOurs(p params, n int, separate bool) (gate, error) {
	l, err := limiter.NewShared(p.rdb, limiter.SharedConfig{Prefix: "bench", Mode: limiter.OutageRefuse, NoCoalescing: separate})
	if err != nil {
		return nil, err
	}
	req := limiter.Request{Group: p.key}
	burst := max(1, p.burst)
	r, err := rule.New("api", p.limit, p.period, rule.WithBurst(burst))
	if err != nil {
		return nil, err
	}
	req.Rules = append(req.Rules, r)
	if n > 1 {
		// The other two rules are far looser, like the per-IP rule of a
		// preset: the first one binds.
		app := rule.Must(rule.New("app", p.limit*10, p.period, rule.WithBurst(burst)))
		egress := rule.Must(rule.New("egress", p.limit*500, 20*p.period, rule.WithBurst(max(100, burst))))
		req.Rules = append(req.Rules, app, egress)
		req.Scopes = []string{"api:x", "app:x", "egress:default"}
	}
	o := &ours{l: l, req: req}
	if p.keys > 1 {
		o.reqs = make([]limiter.Request, p.keys)
		for i := range o.reqs {
			r, err := rule.New("api"+strconv.Itoa(i), p.limit, p.period, rule.WithBurst(burst))
			if err != nil {
				return nil, err
			}
			o.reqs[i] = limiter.Request{Group: p.key, Rules: append([]rule.Rule{r}, req.Rules[1:]...), Scopes: req.Scopes}
		}
	}
	return o, nil
}

func (o *ours) try(ctx context.Context) (bool, time.Duration, error) {
	req := o.req
	if o.reqs != nil {
		req = o.reqs[next(&o.seq, len(o.reqs))]
	}
	res, err := o.l.Reserve(ctx, req)
	if err != nil {
		return false, 0, err
	}
	return res.OK(), res.RetryAfter(), nil
}

func (o *ours) acquire(ctx context.Context, deadline time.Time) (grant, error) {
	req := o.req
	req.MaxWait = max(0, time.Until(deadline))
	res, err := o.l.Reserve(ctx, req)
	if err != nil {
		return grant{}, err
	}
	if !res.OK() {
		return grant{}, errBudget
	}
	gr := grant{ok: true, waited: res.Delay() > 0, scheduled: res.SendAt()}
	if err := res.Wait(ctx); err != nil {
		_ = res.Cancel(context.WithoutCancel(ctx))
		return grant{}, err
	}
	gr.sent = time.Now()
	return gr, nil
}

// ---- go-redis/redis_rate ----

type redisRate struct {
	l     *redis_rate.Limiter
	key   string
	keys  []string // with params.keys > 1
	seq   atomic.Uint64
	limit redis_rate.Limit
}

func newRedisRate(p params) (gate, error) {
	lim := redis_rate.PerSecond(p.limit)
	if p.period != time.Second {
		lim = redis_rate.Limit{Rate: p.limit, Burst: p.limit, Period: p.period}
	}
	return &redisRate{l: redis_rate.NewLimiter(p.rdb), key: p.key, keys: manyKeys(p), limit: lim}, nil
}

// manyKeys names params.keys keys after p.key, or none for one key.
func manyKeys(p params) []string {
	if p.keys <= 1 {
		return nil
	}
	out := make([]string, p.keys)
	for i := range out {
		out[i] = p.key + ":" + strconv.Itoa(i)
	}
	return out
}

func (r *redisRate) try(ctx context.Context) (bool, time.Duration, error) {
	key := r.key
	if r.keys != nil {
		key = r.keys[next(&r.seq, len(r.keys))]
	}
	res, err := r.l.Allow(ctx, key, r.limit)
	if err != nil {
		return false, 0, err
	}
	return res.Allowed > 0, res.RetryAfter, nil
}

func (r *redisRate) acquire(ctx context.Context, deadline time.Time) (grant, error) {
	return pollAcquire(ctx, r, deadline)
}

// ---- ulule/limiter ----

type ululeGate struct {
	l   *ulule.Limiter
	key string
}

func newUlule(p params) (gate, error) {
	store, err := ulredis.NewStoreWithOptions(p.rdb, ulule.StoreOptions{Prefix: "ulule"})
	if err != nil {
		return nil, err
	}
	return &ululeGate{l: ulule.New(store, ulule.Rate{Period: p.period, Limit: int64(p.limit)}), key: p.key}, nil
}

func (u *ululeGate) try(ctx context.Context) (bool, time.Duration, error) {
	c, err := u.l.Get(ctx, u.key)
	if err != nil {
		return false, 0, err
	}
	if !c.Reached {
		return true, 0, nil
	}
	// Reset is in whole seconds: it may already be past while the window
	// still runs; poll no faster than every 10 ms then.
	return false, max(10*time.Millisecond, time.Until(time.Unix(c.Reset, 0))), nil
}

func (u *ululeGate) acquire(ctx context.Context, deadline time.Time) (grant, error) {
	return pollAcquire(ctx, u, deadline)
}

// ---- sorted-set log ----

//go:embed zsetlog.lua
var zsetSource string

var zsetScript = redis.NewScript(zsetSource)

type zsetGate struct {
	rdb             *redis.Client
	keys            []string
	limit, periodMs int64
	skew            time.Duration
	seq             atomic.Uint64
	prefix          string
}

func newZset(p params) (gate, error) {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return &zsetGate{
		rdb: p.rdb, keys: []string{"zset:{" + p.key + "}:value", "zset:{" + p.key + "}:permits"},
		limit: int64(p.limit), periodMs: p.period.Milliseconds(), skew: p.skew, prefix: hex.EncodeToString(b[:]),
	}, nil
}

func (z *zsetGate) try(ctx context.Context) (bool, time.Duration, error) {
	now := time.Now().Add(z.skew).UnixMilli()
	id := z.prefix + strconv.FormatUint(z.seq.Add(1), 36)
	n, err := zsetScript.Run(ctx, z.rdb, z.keys, z.limit, z.periodMs, now, id).Int64()
	if err != nil {
		return false, 0, err
	}
	if n < 0 {
		return true, 0, nil
	}
	return false, time.Duration(n) * time.Millisecond, nil
}

func (z *zsetGate) acquire(ctx context.Context, deadline time.Time) (grant, error) {
	return pollAcquire(ctx, z, deadline)
}

// ---- fixed window INCR + EXPIRE ----

//go:embed fixedwindow.lua
var fixedSource string

var fixedScript = redis.NewScript(fixedSource)

type fixedGate struct {
	rdb    *redis.Client
	key    string
	limit  int64
	period time.Duration
	skew   time.Duration
}

func newFixed(p params) (gate, error) {
	return &fixedGate{rdb: p.rdb, key: "fw:{" + p.key + "}:", limit: int64(p.limit), period: p.period, skew: p.skew}, nil
}

func (f *fixedGate) try(ctx context.Context) (bool, time.Duration, error) {
	now := time.Now().Add(f.skew)
	win := now.UnixNano() / int64(f.period)
	keys := []string{f.key + strconv.FormatInt(win, 10)}
	n, err := fixedScript.Run(ctx, f.rdb, keys, f.period.Milliseconds()).Int64()
	if err != nil {
		return false, 0, err
	}
	if n <= f.limit {
		return true, 0, nil
	}
	next := time.Unix(0, (win+1)*int64(f.period))
	return false, next.Sub(now), nil
}

func (f *fixedGate) acquire(ctx context.Context, deadline time.Time) (grant, error) {
	return pollAcquire(ctx, f, deadline)
}

// ---- x/time/rate per replica ----

type xrate struct{ l *rate.Limiter }

func newXRate(p params) (gate, error) {
	per := float64(p.limit) / float64(max(1, p.replicas)) / p.period.Seconds()
	return &xrate{l: rate.NewLimiter(rate.Limit(per), 1)}, nil
}

func (x *xrate) try(context.Context) (bool, time.Duration, error) {
	r := x.l.Reserve()
	if d := r.Delay(); d > 0 {
		r.Cancel()
		return false, d, nil
	}
	return true, 0, nil
}

func (x *xrate) acquire(ctx context.Context, deadline time.Time) (grant, error) {
	now := time.Now()
	r := x.l.ReserveN(now, 1)
	d := r.DelayFrom(now)
	if now.Add(d).After(deadline) {
		r.CancelAt(now)
		return grant{}, errBudget
	}
	gr := grant{ok: true, waited: d > 0, scheduled: now.Add(d)}
	if err := sleep(ctx, d); err != nil {
		r.Cancel()
		return grant{}, err
	}
	gr.sent = time.Now()
	return gr, nil
}

// ---- the ceiling ----

var noopScript = redis.NewScript("return 1")

type ceiling struct {
	rdb  *redis.Client
	keys [][]string // one key per call, in turn
	seq  atomic.Uint64
}

func newCeiling(p params) (gate, error) {
	if err := noopScript.Load(context.Background(), p.rdb).Err(); err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	c := &ceiling{rdb: p.rdb, keys: [][]string{{"noop:{" + p.key + "}"}}}
	for _, k := range manyKeys(p) {
		c.keys = append(c.keys, []string{"noop:{" + k + "}"})
	}
	if len(c.keys) > 1 {
		c.keys = c.keys[1:]
	}
	return c, nil
}

func (c *ceiling) try(ctx context.Context) (bool, time.Duration, error) {
	return true, 0, noopScript.EvalSha(ctx, c.rdb, c.keys[next(&c.seq, len(c.keys))]).Err()
}

func (c *ceiling) acquire(ctx context.Context, deadline time.Time) (grant, error) {
	return pollAcquire(ctx, c, deadline)
}
