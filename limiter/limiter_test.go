package limiter_test

import (
	"context"
	"errors"
	"math"
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

func TestMain(m *testing.M) { redistest.Main(m) }

func TestMemoryConformance(t *testing.T) {
	limitertest.Run(t, func(t *testing.T, n int) []limiter.Limiter {
		m := limiter.NewMemory()
		out := make([]limiter.Limiter, n)
		for i := range out {
			out[i] = m
		}
		return out
	})
}

// Both ways of calling Redis keep the contract: requests that share calls
// (the default) and one call per request.
func TestRedisConformance(t *testing.T) {
	srv := redistest.Shared(t)
	for _, tc := range []struct {
		name string
		opts []limiter.RedisOption
	}{
		{"coalescing", nil},
		{"uncoalesced", []limiter.RedisOption{limiter.WithoutCoalescing()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if testing.Short() && tc.opts != nil {
				t.Skip("one variant is enough for the edit-test loop: make test runs both")
			}
			limitertest.Run(t, func(t *testing.T, n int) []limiter.Limiter {
				out := make([]limiter.Limiter, n)
				for i := range out {
					l, err := limiter.NewRedis(srv.Client(t), tc.opts...)
					if err != nil {
						t.Fatal(err)
					}
					out[i] = l
				}
				return out
			})
		})
	}
}

// A month in Asia/Shanghai resets at local midnight on the 1st, whatever the
// UTC date, and a day at local midnight.
func TestMemoryCalendarBoundaries(t *testing.T) {
	shanghai, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		unit     rule.Unit
		now      time.Time
		boundary time.Time
	}{
		{rule.Month, time.Date(2026, 11, 30, 23, 59, 58, 0, shanghai), time.Date(2026, 12, 1, 0, 0, 0, 0, shanghai)},
		{rule.Month, time.Date(2027, 2, 28, 10, 0, 0, 0, shanghai), time.Date(2027, 3, 1, 0, 0, 0, 0, shanghai)},
		{rule.Day, time.Date(2026, 11, 22, 23, 59, 59, 0, shanghai), time.Date(2026, 11, 23, 0, 0, 0, 0, shanghai)},
		{rule.Hour, time.Date(2026, 11, 22, 8, 59, 0, 0, shanghai), time.Date(2026, 11, 22, 9, 0, 0, 0, shanghai)},
		{rule.Minute, time.Date(2026, 11, 22, 8, 59, 30, 0, shanghai), time.Date(2026, 11, 22, 9, 0, 0, 0, shanghai)},
	}
	for _, tc := range cases {
		t.Run(tc.unit.String()+" "+tc.now.Format(time.DateTime), func(t *testing.T) {
			var now atomic.Pointer[time.Time]
			now.Store(&tc.now)
			m := limiter.NewMemoryWithClock(func() time.Time { return *now.Load() })
			r := rule.Must(rule.NewCalendar("q", 3, tc.unit, shanghai))
			req := limiter.Request{Group: "g", Rules: []rule.Rule{r}}
			for i := 0; i < 3; i++ {
				if res, _ := m.Reserve(context.Background(), req); !res.OK() {
					t.Fatalf("request %d refused", i+1)
				}
			}
			res, _ := m.Reserve(context.Background(), req)
			if res.OK() || !res.SendAt().Add(res.RetryAfter()).Equal(tc.boundary) {
				t.Fatalf("fourth: %+v, want refused until %v", res, tc.boundary)
			}
			before := tc.boundary.Add(-time.Microsecond)
			now.Store(&before)
			if res, _ := m.Reserve(context.Background(), req); res.OK() {
				t.Fatal("admitted a microsecond before the boundary")
			}
			now.Store(&tc.boundary)
			if res, _ := m.Reserve(context.Background(), req); !res.OK() {
				t.Fatalf("refused at the boundary: %+v", res)
			}
		})
	}
}

// Idle state is swept, so distinct keys do not accumulate.
func TestMemoryForgetsIdleKeys(t *testing.T) {
	var now atomic.Pointer[time.Time]
	t0 := time.Unix(1_800_000_000, 0)
	now.Store(&t0)
	m := limiter.NewMemoryWithClock(func() time.Time { return *now.Load() })
	base := rule.Must(rule.New("k", 10, time.Second))
	for i := 0; i < 1000; i++ {
		r, _ := base.WithKey("path/" + time.Duration(i).String())
		if _, err := m.Reserve(context.Background(), limiter.Request{Group: "g", Rules: []rule.Rule{r}}); err != nil {
			t.Fatal(err)
		}
	}
	if m.Len() != 1000 {
		t.Fatalf("Len = %d, want 1000 while busy", m.Len())
	}
	later := t0.Add(2 * time.Second)
	now.Store(&later)
	if n := m.Len(); n != 0 {
		t.Fatalf("Len = %d after every key went idle, want 0", n)
	}
}

// Calendar states (sweeps of which wait for the earliest window end, not a
// second) go at their windows' ends, each at its own: a day's before a
// month's.
func TestMemoryForgetsEndedCalendarWindows(t *testing.T) {
	var now atomic.Pointer[time.Time]
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	now.Store(&t0)
	m := limiter.NewMemoryWithClock(func() time.Time { return *now.Load() })
	for i := range 100 {
		unit, name := rule.Month, "month:org"
		if i%2 == 0 {
			unit, name = rule.Day, "day:org"
		}
		r := rule.Must(rule.NewCalendar(name+strconv.Itoa(i), 1000, unit, time.UTC))
		if _, err := m.Reserve(context.Background(), limiter.Request{Group: "g", Rules: []rule.Rule{r}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		at   time.Time
		want int
	}{
		{t0.Add(time.Hour), 100},
		{time.Date(2026, 11, 29, 0, 0, 1, 0, time.UTC), 50}, // the days ended
		{time.Date(2026, 11, 30, 0, 0, 1, 0, time.UTC), 50},
		{time.Date(2026, 12, 1, 0, 0, 1, 0, time.UTC), 0}, // the month too
	} {
		now.Store(&tc.at)
		if n := m.Len(); n != tc.want {
			t.Fatalf("at %v: %d states held, want %d", tc.at, n, tc.want)
		}
	}
}

// callCounter counts the commands a client sends for the limiter (the
// connection handshakes of a growing pool are not the limiter's calls).
type callCounter struct{ n atomic.Int64 }

func limiterCall(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "hello", "client", "auth", "select":
		return false
	}
	return true
}

func (c *callCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *callCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if limiterCall(cmd) {
			c.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (c *callCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if limiterCall(cmd) {
				c.n.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

// Under contention (64 waiters on a 20/s rule), each admitted request costs
// at most one Redis call: the slot is booked, the caller sleeps, then sends.
// Without coalescing that is exactly one call each; with it, requests that
// arrive while a call is in flight share the next one.
func TestRedisOneCallPerAdmission(t *testing.T) {
	if testing.Short() {
		t.Skip("seconds of Redis faults or load: make test runs it, make test-short does not")
	}
	for _, tc := range []struct {
		name  string
		opts  []limiter.RedisOption
		exact bool
	}{
		{"coalescing", nil, false},
		{"uncoalesced", []limiter.RedisOption{limiter.WithoutCoalescing()}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Shared(t)
			c := srv.Client(t)
			counter := &callCounter{}
			l, err := limiter.NewRedis(c, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			// Load the scripts first so that no EVAL fallback is counted.
			if err := limiter.LoadScripts(context.Background(), c); err != nil {
				t.Fatal(err)
			}
			r := rule.Must(rule.New("hot", 20, time.Second))
			req := limiter.Request{Group: limitertest.Group(t), Rules: []rule.Rule{r}, MaxWait: 5 * time.Second}
			if _, err := l.Reserve(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			c.AddHook(counter)
			ls := make([]limiter.Limiter, 8)
			for i := range ls {
				ls[i] = l
			}
			sends := limitertest.Load(t, ls, 8, 2*time.Second, req)
			calls := counter.n.Load()
			if calls > int64(len(sends)) || tc.exact && calls != int64(len(sends)) {
				t.Fatalf("%d Redis calls for %d admitted requests, want %s", calls, len(sends),
					map[bool]string{true: "exactly one each", false: "at most one each"}[tc.exact])
			}
			t.Logf("%d admitted, %d calls", len(sends), calls)
		})
	}
}

// Scripts come back after SCRIPT FLUSH (as after a failover) through the
// EVAL fallback, and every key carries a TTL.
func TestRedisScriptReloadAndExpiry(t *testing.T) {
	srv := redistest.Shared(t)
	c := srv.Client(t)
	l, err := limiter.NewRedis(c, limiter.WithPrefix("ttl"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	shanghai, _ := time.LoadLocation("Asia/Shanghai")
	g := limitertest.Group(t)
	req := limiter.Request{Group: g, Scopes: []string{"app"}, Rules: []rule.Rule{
		rule.Must(rule.New("paced", 5, time.Second)),
		rule.Must(rule.NewCalendar("monthly", 100, rule.Month, shanghai)),
	}}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if res, err := l.Reserve(ctx, req); err != nil || !res.OK() {
		t.Fatalf("after SCRIPT FLUSH: %+v %v", res, err)
	}
	// A request of paced rules alone makes one.lua's call, loaded apart
	// (in a group of its own: the one above took the paced rule's slot).
	paced := limiter.Request{Group: g + "-paced", Rules: req.Rules[:1]}
	if res, err := l.Reserve(ctx, paced); err != nil || !res.OK() {
		t.Fatalf("one request of paced rules after SCRIPT FLUSH: %+v %v", res, err)
	}
	if err := l.Penalize(ctx, g, limiter.Penalty{Scope: "app", Until: time.Now().Add(time.Hour), Code: "1"}); err != nil {
		t.Fatal(err)
	}
	keys, err := c.Keys(ctx, "{ttl:"+g+"}:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 4 {
		t.Fatalf("keys %v, want the paced, calendar, penalty and epoch keys", keys)
	}
	for _, k := range keys {
		ttl, err := c.PTTL(ctx, k).Result()
		if err != nil || ttl <= 0 {
			t.Errorf("key %s has TTL %v (%v): it would never expire", k, ttl, err)
		}
	}
	// The paced key goes once its time has passed (T = 200ms).
	if ttl := c.PTTL(ctx, l.RuleKey(g, "paced")).Val(); ttl > 201*time.Millisecond {
		t.Errorf("paced key TTL %v, want at most its emission interval", ttl)
	}
}

func TestRedisUnavailable(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer c.Close()
	l, err := limiter.NewRedis(c)
	if err != nil {
		t.Fatal(err)
	}
	req := limiter.Request{Group: "g", Rules: []rule.Rule{rule.Must(rule.New("k", 1, time.Second))}}
	if _, err := l.Reserve(context.Background(), req); !errors.Is(err, limiter.ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
	if _, err := limiter.NewRedis(nil); err == nil {
		t.Error("NewRedis(nil) accepted")
	}
	if _, err := limiter.NewRedis(c, limiter.WithPrefix("{x}")); err == nil {
		t.Error("a prefix with braces was accepted")
	}
	// A prefix read from a file with its newline is another fleet's keys.
	for _, p := range []string{"billing\n", " billing", "billing ", "bill\ting", "billing\x00"} {
		if _, err := limiter.NewRedis(c, limiter.WithPrefix(p)); err == nil || !strings.Contains(err.Error(), "Prefix") {
			t.Errorf("prefix %q: err = %v, want one naming Prefix", p, err)
		}
	}
	// A space inside is a name.
	if _, err := limiter.NewRedis(c, limiter.WithPrefix("billing eu")); err != nil {
		t.Errorf("prefix %q: %v", "billing eu", err)
	}
	// A typed nil client was a panic.
	var none *redis.Client
	if _, err := limiter.NewRedis(none); err == nil {
		t.Error("NewRedis of a nil *redis.Client accepted")
	}
	if _, err := limiter.NewShared(none, limiter.SharedConfig{}); err == nil {
		t.Error("NewShared of a nil *redis.Client accepted")
	}
	// Each duration is checked on its own and named; past a day the
	// failover's sums overflowed.
	for _, tc := range []struct {
		field string
		cfg   limiter.SharedConfig
	}{
		{"Timeout", limiter.SharedConfig{Timeout: -time.Second}},
		{"Probe", limiter.SharedConfig{Probe: 250 * 365 * 24 * time.Hour}},
		{"Recover", limiter.SharedConfig{Recover: math.MaxInt64}},
	} {
		if _, err := limiter.NewShared(c, tc.cfg); err == nil || !strings.Contains(err.Error(), tc.field+" must be within") {
			t.Errorf("%+v: err = %v, want one naming %s", tc.cfg, err, tc.field)
		}
	}
}

// Wait counts from when the answer arrived: time spent after it shortens
// the wait, and the wake-up never comes before the slot (Redis and the test
// share the machine's clock here).
func TestRedisWaitCountsFromTheAnswer(t *testing.T) {
	l, err := limiter.NewRedis(redistest.Shared(t).Client(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	req := limiter.Request{Group: limitertest.Group(t), MaxWait: time.Second,
		Rules: []rule.Rule{rule.Must(rule.New("paced", 10, time.Second))}}
	if _, err := l.Reserve(ctx, req); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	res, err := l.Reserve(ctx, req)
	if err != nil || !res.OK() || res.Delay() <= 0 {
		t.Fatalf("second: %+v %v, want a booked slot ahead", res, err)
	}
	w := res.Delay()
	after := time.Now()
	// Redis runs on this machine's clock: the slot is SendAt, the limiter
	// decided after before, and Delay counts from when it is read.
	if limit := res.SendAt().Sub(before); w > limit {
		t.Errorf("Delay %v, longer than the %v from the call to the slot", w, limit)
	}
	if wake := after.Add(w); wake.Before(res.SendAt()) {
		t.Errorf("waking at %v is %v before the slot %v", wake, res.SendAt().Sub(wake), res.SendAt())
	}
	if m := limiter.Admit(time.Now(), time.Second, -1, nil, nil); m.Delay() != time.Second {
		t.Errorf("a reservation with no answer time waits %v, want its delay", m.Delay())
	}
}

// outside is a Limiter written the way one outside this package must be:
// it answers with Admit and Refuse (here on top of Memory's decisions).
type outside struct{ m *limiter.Memory }

func (o outside) Reserve(ctx context.Context, req limiter.Request) (limiter.Reservation, error) {
	res, err := o.m.Reserve(ctx, req)
	if err != nil {
		return res, err
	}
	if !res.OK() {
		return limiter.Refuse(res.SendAt(), res.RetryAfter(), res.Rule(), res.Penalty()), nil
	}
	inner := res
	// Delay counts down: read it once, so that now + delay is the slot.
	d := res.Delay()
	out := limiter.Admit(res.SendAt().Add(-d), d, res.Rule(), inner.Cancel, inner.Release)
	return out, nil
}

func (o outside) Penalize(ctx context.Context, group string, p limiter.Penalty) error {
	return o.m.Penalize(ctx, group, p)
}

// A Limiter built outside the package, answering with Admit and Refuse,
// can run the conformance suite: the Reservation stays opaque without
// sealing the interface. Admit's cancel gives back all or nothing, so
// CancelCalendar gives back nothing, and that part is skipped.
func TestOutsideLimiterConformance(t *testing.T) {
	limitertest.Run(t, func(t *testing.T, n int) []limiter.Limiter {
		o := outside{limiter.NewMemory()}
		out := make([]limiter.Limiter, n)
		for i := range out {
			out[i] = o
		}
		return out
	}, "CancelCalendar")
}

// Memory's Delay counts down from the decision on its clock, like Shared's
// from the answer: a Wait made 300ms later sleeps only what is left.
func TestMemoryDelayCountsDown(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC).UnixNano())
	m := limiter.NewMemoryWithClock(func() time.Time { return time.Unix(0, now.Load()) })
	req := limiter.Request{Group: "g", Rules: []rule.Rule{rule.Must(rule.New("r", 1, time.Second))}, MaxWait: 2 * time.Second}
	if res, _ := m.Reserve(context.Background(), req); !res.OK() || res.Delay() != 0 {
		t.Fatalf("first: %+v", res)
	}
	res, _ := m.Reserve(context.Background(), req)
	if !res.OK() || res.Delay() != time.Second {
		t.Fatalf("second: OK %v Delay %v, want a slot in 1s", res.OK(), res.Delay())
	}
	now.Add(int64(300 * time.Millisecond))
	if d := res.Delay(); d != 700*time.Millisecond {
		t.Fatalf("Delay 300ms after the decision = %v, want 700ms", d)
	}
	now.Add(int64(2 * time.Second))
	if d := res.Delay(); d != 0 {
		t.Fatalf("Delay past the slot = %v, want 0", d)
	}
}

// A Reservation made by Admit gives nothing back on CancelCalendar: its
// cancel would give back every rule, the paced slot the request spent too.
// Its Cancel still gives back everything once.
func TestAdmitCancelCalendarGivesNothingBack(t *testing.T) {
	cancels := 0
	res := limiter.Admit(time.Now(), 0, -1, func(context.Context) error { cancels++; return nil }, nil)
	if err := res.CancelCalendar(context.Background()); err != nil || cancels != 0 {
		t.Fatalf("CancelCalendar: err %v, cancel called %d times, want nil and 0", err, cancels)
	}
	if err := res.Cancel(context.Background()); err != nil || cancels != 1 {
		t.Fatalf("Cancel after it: err %v, cancel called %d times, want nil and 1", err, cancels)
	}
}
