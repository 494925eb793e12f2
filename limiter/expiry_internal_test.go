package limiter

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter/rule"
)

// A paced key lives until the last time booked in it has passed, in every
// form of the reserve call: not for the longest its rule could ever book
// ahead (MaxWait + tolerance + T), which kept a key used once for the
// request's longest wait and more, or, for a rule of 1,000 a day in one
// burst, for years.
func TestPacedKeyLivesUntilItsLastBookedTime(t *testing.T) {
	c := redistest.Start(t).Client(t)
	l, err := newRedis(c)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// Ten per 10 s in one burst: T = 10 s, tolerance 90 s.
	const T = 10 * time.Second
	paced := func(key string) rule.Rule { return rule.Must(rule.New(key, 10, 10*time.Second, rule.WithBurst(10))) }
	day := rule.Must(rule.NewCalendar("day", 1000, rule.Day, time.UTC))
	req := func(rules ...rule.Rule) Request {
		return Request{Group: "ttl", Rules: rules, MaxWait: time.Minute}
	}
	for _, tc := range []struct {
		form string
		reqs []Request
		// want maps each paced key to how many times the call books it.
		want map[string]int
	}{
		{"one.lua", []Request{req(paced("one"))}, map[string]int{"one": 1}},
		{"one segment", []Request{req(paced("seg"), day)}, map[string]int{"seg": 1}},
		{"segments", []Request{req(paced("segA"), day), req(paced("segB"), day), req(paced("segA"), day)},
			map[string]int{"segA": 2, "segB": 1}},
		{"lean", []Request{req(paced("leanA")), req(paced("leanB")), req(paced("leanA"))},
			map[string]int{"leanA": 2, "leanB": 1}},
	} {
		out := make([]Reservation, len(tc.reqs))
		if err := l.reserveN(ctx, tc.reqs, out); err != nil {
			t.Fatalf("%s: %v", tc.form, err)
		}
		for i, res := range out {
			if !res.ok {
				t.Fatalf("%s: request %d refused: %+v", tc.form, i, res)
			}
		}
		for key, n := range tc.want {
			ttl, err := c.PTTL(ctx, l.keys.get(l.prefix, ruleTag, "ttl", key).(string)).Result()
			if err != nil {
				t.Fatal(err)
			}
			// Booked n times from now: the last booked time is n·T ahead.
			// A few ms pass between the call and PTTL.
			booked := time.Duration(n) * T
			if ttl > booked+time.Millisecond || ttl < booked-time.Second {
				t.Errorf("%s: key %s booked %d times expires in %v, want just over %v", tc.form, key, n, ttl, booked)
			}
		}
	}
}

// The group's epoch marker outlives every slot a request may book ahead,
// whatever its rules: a window or calendar rule's request waiting seconds
// for its slot kept a marker of one second, and the next call after it
// expired read a new epoch while this replica still held the slot, a loss
// of the state that was none (state_lost, a slot given back and booked
// again, every group's requests held behind it).
func TestEpochMarkerOutlivesSlotsBookedAhead(t *testing.T) {
	c := redistest.Start(t).Client(t)
	l, err := newRedis(c)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	window := rule.Must(rule.NewWindow("w", 1, 3*time.Second))
	req := Request{Group: "marker", Rules: []rule.Rule{window}, MaxWait: 5 * time.Second}
	out := make([]Reservation, 1)
	for i := range 2 {
		if err := l.reserveN(ctx, []Request{req}, out); err != nil {
			t.Fatal(err)
		}
		if !out[0].ok {
			t.Fatalf("reservation %d refused: %+v", i, out[0])
		}
	}
	ahead := time.Until(out[0].SendAt())
	if ahead < 2*time.Second {
		t.Fatalf("the second slot is %v ahead, want about 3s", ahead)
	}
	ttl, err := c.PTTL(ctx, l.keys.get(l.prefix, epochTag, "marker", "").(string)).Result()
	if err != nil {
		t.Fatal(err)
	}
	if ttl < ahead {
		t.Fatalf("the epoch marker expires in %v, before the slot booked %v ahead", ttl, ahead)
	}
}

// A calendar window's fields go once it has ended: its count and the
// marker of its first reconciliation ("r<start>"), which stayed for good
// in a key that every booking kept alive, one field a window.
func TestEndedCalendarWindowLeavesNoFields(t *testing.T) {
	c := redistest.Start(t).Client(t)
	l, err := newRedis(c)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	minute := rule.Must(rule.NewCalendar("minute", 100, rule.Minute, time.UTC))
	key := l.ruleKey("cal", minute.Key())
	ended := strconv.FormatInt(core(&minute).Windows(time.Now())[0], 10)
	if err := c.HSet(ctx, key, ended, 3, "r"+ended, 1).Err(); err != nil {
		t.Fatal(err)
	}
	out := make([]Reservation, 1)
	if err := l.reserveN(ctx, []Request{{Group: "cal", Rules: []rule.Rule{minute}}}, out); err != nil || !out[0].ok {
		t.Fatalf("reserve: %+v %v", out[0], err)
	}
	fields, err := c.HKeys(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fields {
		if f == ended || f == "r"+ended {
			t.Errorf("field %q of the ended window is still there (fields %v)", f, fields)
		}
	}
}

// A give-back reads each rule's key through pcall: a key another writer
// turned into another type gives nothing back, and the rules after it
// still give theirs (here a concurrency lease, which stayed held).
func TestGiveBackPastAKeyOfAnotherType(t *testing.T) {
	c := redistest.Start(t).Client(t)
	l, err := newRedis(c)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	paced := rule.Must(rule.New("p", 10, time.Second))
	lease := rule.Must(rule.NewConcurrency("k", 2, time.Minute))
	req := Request{Group: "giveback", Rules: []rule.Rule{paced, lease}}
	out := make([]Reservation, 1)
	if err := l.reserveN(ctx, []Request{req}, out); err != nil || !out[0].ok {
		t.Fatalf("reserve: %+v %v", out[0], err)
	}
	if err := c.Del(ctx, l.ruleKey("giveback", "p")).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.HSet(ctx, l.ruleKey("giveback", "p"), "x", "y").Err(); err != nil {
		t.Fatal(err)
	}
	if err := l.cancel(ctx, req, out[0]); err != nil {
		t.Fatalf("give-back: %v", err)
	}
	if n, err := c.ZCard(ctx, l.ruleKey("giveback", "k")).Result(); err != nil || n != 0 {
		t.Fatalf("%d leases held after the give-back (%v), want 0", n, err)
	}
}
