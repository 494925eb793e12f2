package limiter_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/limitertest"
	"github.com/quotaware/throttle/limiter/rule"
)

// events collects a Shared limiter's events.
// event is one call of SharedConfig.OnEvent.
type event struct{ Kind, Group string }

// The kinds of events SharedConfig.OnEvent documents.
const (
	stateLost            = "state_lost"
	corruptValue         = "corrupt_value"
	announcementRejected = "announcement_rejected"
	evictable            = "evictable"
)

type events struct {
	mu  sync.Mutex
	all []event
	ch  chan event
}

func newEvents() *events { return &events{ch: make(chan event, 1024)} }

func (e *events) add(kind, group string) {
	ev := event{kind, group}
	e.mu.Lock()
	e.all = append(e.all, ev)
	e.mu.Unlock()
	select {
	case e.ch <- ev:
	default:
	}
}

func (e *events) count(kind string) (n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ev := range e.all {
		if ev.Kind == kind {
			n++
		}
	}
	return n
}

// await waits for an event of kind.
func (e *events) await(t *testing.T, kind string) event {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev := <-e.ch:
			if ev.Kind == kind {
				return ev
			}
		case <-deadline:
			t.Fatalf("no %s event within 10s", kind)
		}
	}
}

func newShared(t *testing.T, c redis.UniversalClient, cfg limiter.SharedConfig, ls ...limiter.Listener) *limiter.Shared {
	t.Helper()
	s, err := limiter.NewShared(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range ls {
		s.Listen(l)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// The Shared limiter keeps the contract, replicas sharing one Redis.
func TestSharedConformance(t *testing.T) {
	srv := redistest.Shared(t)
	limitertest.Run(t, func(t *testing.T, n int) []limiter.Limiter {
		prefix := limitertest.Group(t)
		out := make([]limiter.Limiter, n)
		for i := range out {
			// The contract is Redis's: a slow answer on a loaded machine
			// must not count as an outage here (outages are tested below).
			out[i] = newShared(t, srv.Client(t), limiter.SharedConfig{Prefix: prefix, Mode: limiter.OutageRefuse, Timeout: 5 * time.Second})
		}
		return out
	})
}

// 11.3: after FLUSHALL, new slots start past the ones booked before, on
// every replica, and the loss is reported once per replica.
func TestSharedHoldsBackAfterLostState(t *testing.T) {
	srv := redistest.Start(t)
	prefix := limitertest.Group(t)
	evs := []*events{newEvents(), newEvents()}
	var ls []limiter.Limiter
	for _, ev := range evs {
		ls = append(ls, newShared(t, srv.Client(t), limiter.SharedConfig{Prefix: prefix, Share: 1, Timeout: 5 * time.Second}, limiter.Listener{Event: ev.add}))
	}
	ctx := context.Background()
	rl := rule.Must(rule.New("api", 50, time.Second))
	req := limiter.Request{Group: "g", Rules: []rule.Rule{rl}, MaxWait: 5 * time.Second}
	var sends []time.Time
	book := func(n int) {
		for i := 0; i < n; i++ {
			res, err := ls[i%2].Reserve(ctx, req)
			if err != nil || !res.OK() {
				t.Fatalf("reserve: %+v %v", res, err)
			}
			sends = append(sends, res.SendAt())
		}
	}
	book(100) // two seconds of slots ahead
	last := slices.MaxFunc(sends, time.Time.Compare)
	if err := srv.Client(t).FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	before := len(sends)
	book(20)
	for i, at := range sends[before:] {
		if at.Before(last) {
			t.Errorf("slot %d after FLUSHALL at %v, before the last slot booked before it (%v)", i, at.Format(time.StampMicro), last.Format(time.StampMicro))
		}
	}
	slices.SortFunc(sends, time.Time.Compare)
	if most, at := limitertest.MaxInWindow(sends, time.Second); most > 50 {
		t.Errorf("%d slots in the second from %v, rule allows 50", most, at.Format(time.StampMicro))
	}
	for i, ev := range evs {
		if n := ev.count(stateLost); n != 1 {
			t.Errorf("replica %d reported the loss %d times, want once", i, n)
		}
	}
}

// 11.3: a Redis that may evict keys is reported at start.
func TestSharedWarnsOfEviction(t *testing.T) {
	for _, tc := range []struct {
		policy string
		warn   bool
	}{
		{"allkeys-lru", true},
		{"volatile-ttl", true},
		{"noeviction", false},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			srv := redistest.Start(t, "--maxmemory-policy", tc.policy)
			ev := newEvents()
			s := newShared(t, srv.Client(t), limiter.SharedConfig{Share: 1}, limiter.Listener{Event: ev.add})
			s.Close() // waits for the check
			if got := ev.count(evictable) > 0; got != tc.warn {
				t.Fatalf("evictable reported %v, want %v", got, tc.warn)
			}
		})
	}
}

// 11.6: a Redis that fails on and off (at maxmemory with noeviction, every
// script write refused) keeps the replica on its local share: a few
// switches, not one per failure.
func TestSharedHysteresis(t *testing.T) {
	if testing.Short() {
		t.Skip("seconds of Redis faults or load: make test runs it, make test-short does not")
	}
	srv := redistest.Start(t, "--maxmemory-policy", "noeviction")
	admin := srv.Client(t)
	var mu sync.Mutex
	var switches []bool
	s := newShared(t, srv.Client(t), limiter.SharedConfig{Share: 0.5, Probe: 20 * time.Millisecond, Recover: 400 * time.Millisecond},
		limiter.Listener{Switch: func(down bool, err error) { mu.Lock(); switches = append(switches, down); mu.Unlock() }})
	ctx := context.Background()
	rl := rule.Must(rule.New("api", 1000, time.Second))
	req := limiter.Request{Group: "g", Rules: []rule.Rule{rl}, MaxWait: time.Second}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := s.Reserve(ctx, req); err != nil && !errors.Is(err, limiter.ErrUnavailable) {
				t.Error(err)
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	// Flap for 3s: 150ms full, 150ms fine (the fault schedule is the
	// behaviour under test).
	for i := 0; i < 10; i++ {
		admin.ConfigSet(ctx, "maxmemory", "1")
		time.Sleep(150 * time.Millisecond)
		admin.ConfigSet(ctx, "maxmemory", "0")
		time.Sleep(150 * time.Millisecond)
	}
	// Healthy again: back after Recover (doubled at most a few times).
	deadline := time.Now().Add(10 * time.Second)
	for s.Down() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	<-done
	mu.Lock()
	defer mu.Unlock()
	t.Logf("switches over 10 flaps: %v", switches)
	// Without hysteresis it switched on every flap (20 switches); with it,
	// each return waits out Recover, doubled while the flapping goes on.
	if len(switches) == 0 || len(switches) > 6 {
		t.Fatalf("%d switches over 10 flaps (%v), want a few", len(switches), switches)
	}
	if s.Down() {
		t.Fatal("not back on Redis 10s after it healed")
	}
}

// setCalendarField books a request of the calendar rule, then sets the
// count of the window booked to v.
func setCalendarField(ctx context.Context, c *redis.Client, calendar rule.Rule, v string) func(l *limiter.Redis, g string) error {
	return func(l *limiter.Redis, g string) error {
		if _, err := l.Reserve(ctx, limiter.Request{Group: g, Rules: []rule.Rule{calendar}}); err != nil {
			return err
		}
		key := l.RuleKey(g, calendar.Key())
		fields, err := c.HKeys(ctx, key).Result()
		if err != nil || len(fields) == 0 {
			return errors.New("no calendar field")
		}
		return c.HSet(ctx, key, fields[0], v).Err()
	}
}

// 11.7: a corrupt value in any key reads as absent and is replaced,
// reported, and never fails a request, even failing closed.
func TestSharedHealsCorruptKeys(t *testing.T) {
	srv := redistest.Shared(t)
	c := srv.Client(t)
	ctx := context.Background()
	shanghai, _ := time.LoadLocation("Asia/Shanghai")
	paced := rule.Must(rule.New("paced", 10, time.Second))
	calendar := rule.Must(rule.NewCalendar("monthly", 100, rule.Month, shanghai))
	conc := rule.Must(rule.NewConcurrency("conc", 2, time.Second))
	window := rule.Must(rule.NewWindow("window", 5, time.Minute))
	cases := []struct {
		name    string
		rules   []rule.Rule
		corrupt func(l *limiter.Redis, g string) error
	}{
		{"paced not a number", []rule.Rule{paced}, func(l *limiter.Redis, g string) error {
			return c.Set(ctx, l.RuleKey(g, "paced"), "not-a-number", 0).Err()
		}},
		// tonumber reads these as numbers: beyond any time this project
		// stores, they are corrupt too (kept, they refused every request).
		{"paced a huge number", []rule.Rule{paced}, func(l *limiter.Redis, g string) error {
			return c.Set(ctx, l.RuleKey(g, "paced"), "1e300", 0).Err()
		}},
		{"paced inf", []rule.Rule{paced}, func(l *limiter.Redis, g string) error {
			return c.Set(ctx, l.RuleKey(g, "paced"), "inf", 0).Err()
		}},
		{"paced nan", []rule.Rule{paced}, func(l *limiter.Redis, g string) error {
			return c.Set(ctx, l.RuleKey(g, "paced"), "nan", 0).Err()
		}},
		{"paced a hash", []rule.Rule{paced}, func(l *limiter.Redis, g string) error {
			return c.HSet(ctx, l.RuleKey(g, "paced"), "x", "y").Err()
		}},
		{"calendar a string", []rule.Rule{calendar}, func(l *limiter.Redis, g string) error {
			return c.Set(ctx, l.RuleKey(g, "monthly"), "junk", 0).Err()
		}},
		{"calendar field not a number", []rule.Rule{calendar, paced}, func(l *limiter.Redis, g string) error {
			res, err := l.Reserve(ctx, limiter.Request{Group: g, Rules: []rule.Rule{calendar}})
			if err != nil {
				return err
			}
			fields, err := c.HKeys(ctx, l.RuleKey(g, "monthly")).Result()
			if err != nil || len(fields) == 0 {
				return errors.New("no calendar field")
			}
			_ = res
			return c.HSet(ctx, l.RuleKey(g, "monthly"), fields[0], "junk").Err()
		}},
		{"concurrency a string", []rule.Rule{conc}, func(l *limiter.Redis, g string) error {
			return c.Set(ctx, l.RuleKey(g, "conc"), "junk", 0).Err()
		}},
		{"penalty garbage", []rule.Rule{paced}, func(l *limiter.Redis, g string) error {
			return c.Set(ctx, l.PenaltyKey(g, "app"), "garbage|x", 0).Err()
		}},
		{"penalty a huge end", []rule.Rule{paced}, func(l *limiter.Redis, g string) error {
			return c.Set(ctx, l.PenaltyKey(g, "app"), "1e300|x", 0).Err()
		}},
		// tonumber reads these as a live end, which Inspect, the quota
		// resets and the re-read of known penalties (ParseInt) do not:
		// kept, such a key refused every request unseen.
		{"penalty an end in float form", []rule.Rule{paced}, func(l *limiter.Redis, g string) error {
			return c.Set(ctx, l.PenaltyKey(g, "app"), fmt.Sprintf("%.6e|x", float64(time.Now().Add(time.Hour).UnixMicro())), 0).Err()
		}},
		{"penalty an end in hex", []rule.Rule{paced}, func(l *limiter.Redis, g string) error {
			return c.Set(ctx, l.PenaltyKey(g, "app"), "0x"+strconv.FormatInt(time.Now().Add(time.Hour).UnixMicro(), 16)+"|x", 0).Err()
		}},
		{"penalty an end after a space", []rule.Rule{paced}, func(l *limiter.Redis, g string) error {
			return c.Set(ctx, l.PenaltyKey(g, "app"), " "+strconv.FormatInt(time.Now().Add(time.Hour).UnixMicro(), 10)+"|x", 0).Err()
		}},
		{"calendar field inf", []rule.Rule{calendar, paced}, func(l *limiter.Redis, g string) error {
			if _, err := l.Reserve(ctx, limiter.Request{Group: g, Rules: []rule.Rule{calendar}}); err != nil {
				return err
			}
			fields, err := c.HKeys(ctx, l.RuleKey(g, "monthly")).Result()
			if err != nil || len(fields) == 0 {
				return errors.New("no calendar field")
			}
			return c.HSet(ctx, l.RuleKey(g, "monthly"), fields[0], "inf").Err()
		}},
		// tonumber reads these too, but no count of ours is one: "1.5"
		// failed the HINCRBY that books (every request an outage), a
		// negative count admitted that many more.
		{"calendar field a decimal", []rule.Rule{calendar, paced}, setCalendarField(ctx, c, calendar, "1.5")},
		{"calendar field negative", []rule.Rule{calendar, paced}, setCalendarField(ctx, c, calendar, "-1000")},
		{"calendar field hex", []rule.Rule{calendar, paced}, setCalendarField(ctx, c, calendar, "0x10")},
		{"window a huge time", []rule.Rule{window}, func(l *limiter.Redis, g string) error {
			return c.Set(ctx, l.RuleKey(g, "window"), "99999999999999999999:1", 0).Err()
		}},
		// A paced rule's time under a window rule's key (a release that
		// changed the rule's kind, on half a fleet) is no log either.
		{"window a paced time", []rule.Rule{window}, func(l *limiter.Redis, g string) error {
			return c.Set(ctx, l.RuleKey(g, "window"), strconv.FormatInt(time.Now().UnixMicro(), 10), 0).Err()
		}},
		{"window text", []rule.Rule{window}, func(l *limiter.Redis, g string) error {
			return c.Set(ctx, l.RuleKey(g, "window"), "junk", 0).Err()
		}},
		{"epoch marker garbage", []rule.Rule{paced}, func(l *limiter.Redis, g string) error {
			return c.Set(ctx, l.EpochKey(g), "garbage", 0).Err()
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ev := newEvents()
			s := newShared(t, srv.Client(t), limiter.SharedConfig{Prefix: limitertest.Group(t), Mode: limiter.OutageRefuse, Share: 1, Timeout: 5 * time.Second}, limiter.Listener{Event: ev.add})
			l := s.Redis()
			g := limitertest.Group(t)
			if err := tc.corrupt(l, g); err != nil {
				t.Fatal(err)
			}
			req := limiter.Request{Group: g, Rules: tc.rules, Scopes: []string{"app"}}
			for i := 0; i < 2; i++ {
				res, err := s.Reserve(ctx, req)
				if err != nil || !res.OK() {
					t.Fatalf("reserve %d over the corrupt key: %+v %v", i, res, err)
				}
				if err := res.Release(ctx); err != nil {
					t.Fatal(err)
				}
				// Paced at 10/s: the second would wait; give it back.
				_ = res.Cancel(ctx)
			}
			if s.Down() {
				t.Fatal("a corrupt key made Redis count as down")
			}
			// (MGET reads a paced key of another type as absent, and a bad
			// marker starts a new epoch: both are replaced unreported.)
			quiet := tc.name == "epoch marker garbage" || tc.name == "paced a hash"
			if !quiet && ev.count(corruptValue) == 0 {
				t.Error("the corrupt value was not reported")
			}
		})
	}
	// The registry key too.
	prefix := limitertest.Group(t)
	if err := c.Set(ctx, "{"+prefix+":registry}:replicas", "junk", 0).Err(); err != nil {
		t.Fatal(err)
	}
	ev := newEvents()
	newShared(t, srv.Client(t), limiter.SharedConfig{Prefix: prefix}, limiter.Listener{Event: ev.add})
	if e := ev.await(t, corruptValue); e.Group != "" {
		t.Fatalf("event %+v, want the registry's (no group)", e)
	}
}

// 11.11: Close ends every goroutine the Shared limiter started (registry
// beat, announcement watch, eviction check, writes of outage penalties).
func TestSharedCloseLeavesNoGoroutine(t *testing.T) {
	srv := redistest.Start(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(),
		goleak.IgnoreTopFunction("github.com/quotaware/throttle/limiter.(*fineWaker).run"))
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	s, err := limiter.NewShared(c, limiter.SharedConfig{Prefix: limitertest.Group(t)})
	if err != nil {
		t.Fatal(err)
	}
	req := limiter.Request{Group: "g", Rules: []rule.Rule{rule.Must(rule.New("api", 10, time.Second))}}
	if _, err := s.Reserve(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if err := s.Penalize(context.Background(), "g", limiter.Penalty{Scope: "app", Until: time.Now().Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s.Close() // idempotent
}

// Shared records a calendar rule in the catalogue the first time it meets
// it in a window, so that Inspect (and throttlectl) can give its limit;
// later requests in the window write nothing more.
func TestSharedDescribesCalendarRules(t *testing.T) {
	srv := redistest.Shared(t)
	c := srv.Client(t)
	prefix := limitertest.Group(t)
	s, err := limiter.NewShared(c, limiter.SharedConfig{Prefix: prefix, Mode: limiter.OutageRefuse, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	day := rule.Must(rule.NewCalendar("day:org1", 100, rule.Day, time.UTC))
	req := limiter.Request{Group: "g", Rules: []rule.Rule{rule.Must(rule.New("api", 100, time.Second)), day}, MaxWait: time.Second}
	for range 3 {
		if res, err := s.Reserve(context.Background(), req); err != nil || !res.OK() {
			t.Fatalf("Reserve: %+v %v", res, err)
		}
	}
	s.Close() // waits for the description written off the request path
	catalog := "{" + prefix + ":g}:rules"
	if fields, err := c.HKeys(context.Background(), catalog).Result(); err != nil || len(fields) != 1 || fields[0] != "day:org1" {
		t.Fatalf("catalogue fields %q (%v), want the calendar rule alone", fields, err)
	}
	reader, err := limiter.NewShared(c, limiter.SharedConfig{Prefix: prefix, Mode: limiter.OutageRefuse, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	st, err := reader.Inspect(context.Background(), "g")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, g := range st.Groups {
		for _, r := range g.Rules {
			if r.Key == "day:org1" {
				found = true
				if r.Limit != 100 || r.Used != 3 || r.Window != "day" {
					t.Errorf("calendar rule state %+v, want 3 of 100 used this day", r)
				}
			}
		}
	}
	if !found {
		t.Errorf("Inspect %+v: the calendar rule is missing", st)
	}
}
