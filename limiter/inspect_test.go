package limiter_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quotaware/throttle/limiter/inspect"

	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/limitertest"
	"github.com/quotaware/throttle/limiter/rule"
	"github.com/redis/go-redis/v9"
)

// fillGroup books state of every kind in group and returns the calendar
// rule it described: 5 requests on a paced rule of 1/s (slots booked about
// 4s ahead), 5 of a 100-a-day calendar rule, 1 lease of a concurrency rule,
// and a penalty.
func fillGroup(t *testing.T, l *limiter.Redis, group string) (rule.Rule, time.Time) {
	t.Helper()
	ctx := context.Background()
	paced := rule.Must(rule.New("api:/v1/x", 1, time.Second))
	day := rule.Must(rule.NewCalendar("day:org1", 100, rule.Day, time.UTC))
	lease := rule.Must(rule.NewConcurrency("conc", 3, time.Minute))
	if err := l.Describe(ctx, group, paced, day, lease); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if res, err := l.Reserve(ctx, limiter.Request{Group: group, Rules: []rule.Rule{paced, day}, MaxWait: time.Minute}); err != nil || !res.OK() {
			t.Fatalf("Reserve: %+v, %v", res, err)
		}
	}
	if res, err := l.Reserve(ctx, limiter.Request{Group: group, Rules: []rule.Rule{lease}}); err != nil || !res.OK() {
		t.Fatalf("Reserve lease: %+v, %v", res, err)
	}
	until := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	if err := l.Penalize(ctx, group, limiter.Penalty{Scope: "app:a", Until: until, Code: "90018"}); err != nil {
		t.Fatal(err)
	}
	return day, until
}

func checkGroup(t *testing.T, st inspect.State, group string, until time.Time) {
	t.Helper()
	if len(st.Groups) != 1 || st.Groups[0].Group != group {
		t.Fatalf("groups = %+v, want only %q", st.Groups, group)
	}
	g := st.Groups[0]
	if len(g.Penalties) != 1 || g.Penalties[0].Scope != "app:a" || g.Penalties[0].Code != "90018" || !g.Penalties[0].Until.Equal(until) {
		t.Fatalf("penalties = %+v, want app:a 90018 until %v", g.Penalties, until)
	}
	byKey := map[string]inspect.RuleState{}
	for _, r := range g.Rules {
		byKey[r.Key] = r
	}
	if r := byKey["api:/v1/x"]; r.Kind != "paced" || r.Ahead < 3*time.Second || r.Ahead > 5*time.Second {
		t.Errorf("paced rule = %+v, want slots booked about 4s ahead", r)
	}
	tomorrow := st.Now.UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
	if r := byKey["day:org1"]; r.Kind != "calendar" || r.Used != 5 || r.Limit != 100 || r.Window != "day" || !r.ResetsAt.Equal(tomorrow) {
		t.Errorf("calendar rule = %+v, want 5 / 100 this day, resetting %v", r, tomorrow)
	} else if w := r.Words(st.Now); !strings.HasPrefix(w, "5 / 100 used (5%) this day, resets ") {
		t.Errorf("words = %q", w)
	}
	if r := byKey["conc"]; r.Kind != "concurrency" || r.InFlight != 1 {
		t.Errorf("concurrency rule = %+v, want 1 in flight", r)
	}
	if len(g.Rules) != 3 {
		t.Errorf("rules = %+v, want 3", g.Rules)
	}
}

// Inspect reports exactly what the limiter booked, per group, on one
// server; groups are found by scanning when none is named.
func TestInspect(t *testing.T) {
	srv := redistest.Shared(t)
	prefix := limitertest.Group(t)
	l, err := limiter.NewRedis(srv.Client(t), limiter.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := l.Inspect(ctx); !errors.Is(err, inspect.ErrNoKeys) {
		t.Fatalf("Inspect of an empty prefix: %v, want ErrNoKeys", err)
	}
	group := "dingtalk"
	_, until := fillGroup(t, l, group)
	reg := limiter.StartRegistry(srv.Client(t), prefix, time.Second)
	t.Cleanup(reg.Close)
	// The registry's first beat is its own goroutine's: wait for it.
	waitFor(t, 5*time.Second, "the replica's first beat", func() bool {
		st, err := l.Inspect(ctx)
		return err == nil && len(st.Replicas) == 1
	})

	st, err := l.Inspect(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	checkGroup(t, st, group, until)
	all, err := l.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkGroup(t, all, group, until)
	if len(all.Replicas) != 1 {
		t.Fatalf("replicas = %+v, want 1", all.Replicas)
	}
	if !all.Active() {
		t.Fatal("Active = false with a penalty")
	}
}

// On a cluster, Inspect scans the node that owns the group's slot.
func TestInspectCluster(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	l, err := limiter.NewRedis(c.Client(t), limiter.WithPrefix("ops"))
	if err != nil {
		t.Fatal(err)
	}
	_, until := fillGroup(t, l, "wechat")
	st, err := l.Inspect(context.Background(), "wechat")
	if err != nil {
		t.Fatal(err)
	}
	checkGroup(t, st, "wechat", until)
	all, err := l.Inspect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	checkGroup(t, all, "wechat", until)
}

// LiftPenalty removes the penalty and every watcher hears of it; a forged
// lift of a penalty still recorded is not passed on.
func TestLiftPenalty(t *testing.T) {
	srv := redistest.Shared(t)
	prefix := limitertest.Group(t)
	ctx := context.Background()
	l, err := limiter.NewRedis(srv.Client(t), limiter.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	lifted := make(chan string, 10)
	stop := l.WatchLifts(func(group, scope string) { lifted <- group + " " + scope })
	t.Cleanup(stop)
	until := time.Now().Add(time.Hour)
	for _, s := range []string{"app:a", "app:b"} {
		if err := l.Penalize(ctx, "g", limiter.Penalty{Scope: s, Until: until, Code: "88"}); err != nil {
			t.Fatal(err)
		}
	}
	// The watcher subscribes in the background: publish until it hears.
	forged := "\x00lift\ng\napp:b"
	client := srv.Client(t)
	var got string
	for got == "" {
		if err := client.Publish(ctx, prefix+":penalties", forged).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := l.LiftPenalty(ctx, "g", "app:a"); err != nil {
			t.Fatal(err)
		}
		select {
		case got = <-lifted:
		case <-time.After(50 * time.Millisecond):
		}
	}
	if got != "g app:a" {
		t.Fatalf("lift heard: %q, want g app:a (the forged lift of app:b must not pass)", got)
	}
	res, err := l.Reserve(ctx, limiter.Request{Group: "g", Scopes: []string{"app:a"}})
	if err != nil || !res.OK() {
		t.Fatalf("Reserve after lift: %+v, %v", res, err)
	}
	res, err = l.Reserve(ctx, limiter.Request{Group: "g", Scopes: []string{"app:b"}})
	if err != nil || res.OK() || res.Penalty() == nil {
		t.Fatalf("Reserve of the scope still penalised: %+v, %v", res, err)
	}
	if ok, err := l.LiftPenalty(ctx, "g", "app:none"); ok || err != nil {
		t.Fatalf("LiftPenalty of no penalty = %v, %v; want false, nil", ok, err)
	}
	if _, err := l.LiftPenalty(ctx, "g", ""); !errors.Is(err, limiter.ErrInvalidRequest) {
		t.Fatalf("LiftPenalty with an empty scope: %v, want ErrInvalidRequest", err)
	}
}

// Penalties are read apart from rule keys: more rule keys than MaxKeys cut
// the rule list only; more penalty keys than MaxPenaltyKeys are said
// (PenaltiesTruncated, Complete fails); replica faults are read.
func TestInspectBoundsAndFaults(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	l, err := limiter.NewRedis(c, limiter.WithPrefix("ops"))
	if err != nil {
		t.Fatal(err)
	}
	fill := redis.NewScript(`for i = 0, tonumber(ARGV[2]) - 1 do redis.call('SET', ARGV[1] .. i, ARGV[3], 'EX', 3600) end return 1`)
	if err := fill.Run(ctx, c, nil, "{ops:feishu}:r:chat:", 3*inspect.MaxKeys, "1").Err(); err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	for _, g := range []string{"feishu", "dingtalk"} {
		if err := l.Penalize(ctx, g, limiter.Penalty{Scope: "ip", Until: until, Code: "ban"}); err != nil {
			t.Fatal(err)
		}
	}
	// A replica whose user may neither publish nor subscribe has two
	// faults, one line each: both are read.
	c.Set(ctx, "{ops:registry}:fault:r1", "publish: NOPERM no publish\nsubscribe: NOPERM no channel", time.Minute)
	st, err := l.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Groups) != 2 || st.Groups[0].Group != "dingtalk" || st.Groups[1].Group != "feishu" {
		t.Fatalf("groups %+v, want dingtalk and feishu", st.Groups)
	}
	for _, g := range st.Groups {
		if len(g.Penalties) != 1 || g.Penalties[0].Code != "ban" || g.PenaltiesTruncated {
			t.Errorf("%s: penalties %+v, want the ban", g.Group, g.Penalties)
		}
	}
	if f := st.Groups[1]; !f.Truncated || len(f.Rules) != inspect.MaxKeys {
		t.Errorf("feishu: %d rules, truncated %v; want the rule list cut at %d", len(f.Rules), f.Truncated, inspect.MaxKeys)
	}
	if err := st.Complete(); err != nil {
		t.Errorf("Complete: %v, want nil (every penalty read)", err)
	}
	if len(st.Faults) != 2 || st.Faults[0] != (inspect.Fault{Replica: "r1", What: "publish", Error: "NOPERM no publish"}) ||
		st.Faults[1] != (inspect.Fault{Replica: "r1", What: "subscribe", Error: "NOPERM no channel"}) {
		t.Errorf("faults %+v, want the publish and the subscribe fault", st.Faults)
	}

	over := strconv.FormatInt(time.Now().Add(-time.Minute).UnixMicro(), 10) + "|old"
	if err := fill.Run(ctx, c, nil, "{ops:wecom}:p:member:", inspect.MaxPenaltyKeys+1, over).Err(); err != nil {
		t.Fatal(err)
	}
	st, err = l.Inspect(ctx, "wecom")
	if err != nil {
		t.Fatal(err)
	}
	if g := st.Groups[0]; !g.PenaltiesTruncated || len(g.Penalties) != 0 {
		t.Fatalf("wecom: %d penalties, truncated %v; want none active and the cut said", len(g.Penalties), g.PenaltiesTruncated)
	}
	if err := st.Complete(); !errors.Is(err, inspect.ErrIncomplete) {
		t.Fatalf("Complete: %v, want ErrIncomplete", err)
	}
}

// A penalty given until the year 10000 is shown ending with the year 9999,
// the latest time JSON writes: `throttlectl status -json` printed nothing
// at all for it. One past 10^18 µs is corrupt and not shown, as the script
// reads it.
func TestInspectFarPenalty(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	l, err := limiter.NewRedis(c, limiter.WithPrefix("far"))
	if err != nil {
		t.Fatal(err)
	}
	c.Set(ctx, "{far:dingtalk}:p:app:x", "253402300800000000|90018", time.Minute)
	c.Set(ctx, "{far:dingtalk}:p:app:y", "2000000000000000000|90018", time.Minute)
	st, err := l.Inspect(ctx, "dingtalk")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := json.Marshal(st); err != nil {
		t.Fatalf("the state does not encode: %v", err)
	}
	g := st.Groups[0]
	if len(g.Penalties) != 1 || g.Penalties[0].Scope != "app:x" || g.Penalties[0].Until.Year() != 9999 {
		t.Fatalf("penalties %+v, want app:x shown until the year 9999", g.Penalties)
	}
}

// A penalty value of a megabyte (written by hand, or by a hostile writer)
// refuses as any penalty does, but its code comes back cut short: in a
// refused reserve's reply, its Penalty, and what Inspect shows. Before, the
// whole value travelled in every refused reply and into every breaker,
// error and log line.
func TestAHugePenaltyValueComesBackCut(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	l, err := limiter.NewRedis(c, limiter.WithPrefix("huge"))
	if err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(time.Hour)
	c.Set(ctx, "{huge:g}:p:app:x", strconv.FormatInt(until.UnixMicro(), 10)+"|"+strings.Repeat("9", 1<<20), time.Minute)
	req := limiter.Request{Group: "g", Rules: []rule.Rule{rule.Must(rule.New("api", 10, time.Second))}, Scopes: []string{"app:x"}}
	res, err := l.Reserve(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	p := res.Penalty()
	if res.OK() || p == nil || p.Scope != "app:x" || len(p.Code) > 128 || !strings.HasPrefix(p.Code, "999") {
		t.Fatalf("reserve under a huge penalty: ok %v, penalty %.200v; want refused on app:x, its code cut to at most 128 bytes", res.OK(), p)
	}
	st, err := l.Inspect(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Groups) != 1 || len(st.Groups[0].Penalties) != 1 || len(st.Groups[0].Penalties[0].Code) > 128 {
		t.Fatalf("Inspect: %d groups; want the penalty with its code cut to at most 128 bytes", len(st.Groups))
	}
}

// What throttlectl shows of a calendar rule follows its limit when the
// limit changes under its key (a quota reconciled with the provider's
// count): it used to show the first limit until the window ended.
func TestInspectShowsTheCalendarLimitInForce(t *testing.T) {
	srv := redistest.Start(t)
	s := newShared(t, srv.Client(t), limiter.SharedConfig{Prefix: "climit"})
	ctx := context.Background()
	shown := func() int64 {
		st, err := s.Inspect(ctx, "g")
		if err != nil || len(st.Groups) == 0 {
			return -1
		}
		for _, r := range st.Groups[0].Rules {
			if r.Key == "day:x" {
				return r.Limit
			}
		}
		return -1
	}
	for _, limit := range []int{100, 10} {
		day := rule.Must(rule.NewCalendar("day:x", limit, rule.Day, time.UTC))
		if _, err := s.Reserve(ctx, limiter.Request{Group: "g", Rules: []rule.Rule{day}}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, fmt.Sprintf("limit %d shown", limit), func() bool { return shown() == int64(limit) })
	}
}
