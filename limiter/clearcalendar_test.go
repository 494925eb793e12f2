package limiter_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/limitertest"
	"github.com/quotaware/throttle/limiter/rule"
)

// A cleared calendar window admits its whole limit again, on every replica
// (two Shared on one Redis), and only the rules named are cleared; a
// cancel of a call booked before the clear leaves the count at zero rather
// than below it.
func TestClearCalendarStartsTheWindowAgain(t *testing.T) {
	srv := redistest.Shared(t)
	prefix := limitertest.Group(t)
	cfg := limiter.SharedConfig{Prefix: prefix, Mode: limiter.OutageRefuse, Timeout: 5 * time.Second}
	a := newShared(t, srv.Client(t), cfg)
	b := newShared(t, srv.Client(t), cfg)
	ctx := context.Background()
	zone := middayZone()
	day := rule.Must(rule.NewCalendar("day:wx:/cgi-bin/x", 3, rule.Day, zone))
	other := rule.Must(rule.NewCalendar("day:wx:/cgi-bin/y", 3, rule.Day, zone))
	fill := func(s *limiter.Shared, r rule.Rule) (admitted int, last limiter.Reservation) {
		t.Helper()
		for range 4 {
			res, err := s.Reserve(ctx, limiter.Request{Group: "wechat", Rules: []rule.Rule{r}})
			if err != nil {
				t.Fatal(err)
			}
			if res.OK() {
				admitted++
				last = res
			}
		}
		return admitted, last
	}
	if n, _ := fill(a, day); n != 3 {
		t.Fatalf("admitted %d of a limit of 3", n)
	}
	_, booked := fill(b, other)
	if err := a.ClearCalendar(ctx, "wechat", []rule.Rule{day}); err != nil {
		t.Fatal(err)
	}
	n, err := b.CalendarUsed(ctx, "wechat", []rule.Rule{day, other})
	if err != nil || n[0] != 0 || n[1] != 3 {
		t.Fatalf("counts after clearing one rule = %v, %v; want [0 3]", n, err)
	}
	if got, _ := fill(b, day); got != 3 {
		t.Fatalf("the other replica admitted %d after the clear, want the whole limit of 3", got)
	}
	if err := b.ClearCalendar(ctx, "wechat", []rule.Rule{other}); err != nil {
		t.Fatal(err)
	}
	if err := booked.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := a.CalendarUsed(ctx, "wechat", []rule.Rule{other}); err != nil || n[0] != 0 {
		t.Fatalf("count after a cancel of a call booked before the clear = %v, %v; want 0", n, err)
	}
	// Booked before the clear, given back after a booking made since: the
	// new count keeps that booking (it used to lose it).
	reserve := func(s *limiter.Shared) limiter.Reservation {
		t.Helper()
		res, err := s.Reserve(ctx, limiter.Request{Group: "wechat", Rules: []rule.Rule{day}})
		if err != nil || !res.OK() {
			t.Fatalf("reserve after a clear: %+v %v", res, err)
		}
		return res
	}
	for _, s := range []*limiter.Shared{a, b} {
		if err := s.ClearCalendar(ctx, "wechat", []rule.Rule{day}); err != nil {
			t.Fatal(err)
		}
	}
	before := reserve(a)
	if err := a.ClearCalendar(ctx, "wechat", []rule.Rule{day}); err != nil {
		t.Fatal(err)
	}
	reserve(b)
	if err := before.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := a.CalendarUsed(ctx, "wechat", []rule.Rule{day}); err != nil || n[0] != 1 {
		t.Fatalf("count after a cancel of a call booked before the clear = %v, %v; want 1, the booking made since", n, err)
	}
	if got, _ := fill(a, other); got != 3 {
		t.Fatalf("admitted %d after the clear and the cancel, want 3", got)
	}

	paced := rule.Must(rule.New("p", 1, time.Second))
	for name, rules := range map[string][]rule.Rule{"a paced rule": {day, paced}, "no rule": nil} {
		if err := a.ClearCalendar(ctx, "wechat", rules); !errors.Is(err, limiter.ErrInvalidRequest) {
			t.Errorf("%s: %v, want ErrInvalidRequest", name, err)
		}
	}
}

// The Memory limiter clears the same way.
func TestMemoryClearCalendar(t *testing.T) {
	m := limiter.NewMemory()
	ctx := context.Background()
	day := rule.Must(rule.NewCalendar("day:wx:/cgi-bin/x", 2, rule.Day, middayZone()))
	var booked limiter.Reservation // the last admitted
	admit := func() int {
		n := 0
		for range 3 {
			res, err := m.Reserve(ctx, limiter.Request{Group: "wechat", Rules: []rule.Rule{day}})
			if err != nil {
				t.Fatal(err)
			}
			if res.OK() {
				n++
				booked = res
			}
		}
		return n
	}
	if n := admit(); n != 2 {
		t.Fatalf("admitted %d of 2", n)
	}
	if err := m.ClearCalendar(ctx, "wechat", []rule.Rule{day}); err != nil {
		t.Fatal(err)
	}
	if n := admit(); n != 2 {
		t.Fatalf("admitted %d after the clear, want 2", n)
	}
	// A booking made before a clear, given back after one made since,
	// leaves that one counted: the window admits one more, not two.
	if err := m.ClearCalendar(ctx, "wechat", []rule.Rule{day}); err != nil {
		t.Fatal(err)
	}
	if n := admit(); n != 2 {
		t.Fatalf("admitted %d after the second clear, want 2", n)
	}
	before := booked
	if err := m.ClearCalendar(ctx, "wechat", []rule.Rule{day}); err != nil {
		t.Fatal(err)
	}
	if res, err := m.Reserve(ctx, limiter.Request{Group: "wechat", Rules: []rule.Rule{day}}); err != nil || !res.OK() {
		t.Fatalf("reserve after the clear: %+v %v", res, err)
	}
	if err := before.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
	if n := admit(); n != 1 {
		t.Fatalf("admitted %d after a cancel of a booking made before the clear, want 1", n)
	}
	if err := m.ClearCalendar(ctx, "wechat", []rule.Rule{rule.Must(rule.New("p", 1, time.Second))}); !errors.Is(err, limiter.ErrInvalidRequest) {
		t.Fatalf("a paced rule: %v, want ErrInvalidRequest", err)
	}
}

// A provider's count asked before a clear is the count the reset ended: it
// changes nothing, where it used to put the whole day's count back. One
// asked after the clear counts as any other.
func TestCountAskedBeforeAClearIsIgnored(t *testing.T) {
	srv := redistest.Shared(t)
	s := newShared(t, srv.Client(t), limiter.SharedConfig{Prefix: limitertest.Group(t), Mode: limiter.OutageRefuse, Timeout: 5 * time.Second})
	ctx := context.Background()
	day := rule.Must(rule.NewCalendar("day:wx:/cgi-bin/x", 1000, rule.Day, middayZone()))
	if _, err := s.SetCalendarUsed(ctx, "wechat", day, 900, -1, time.Now()); err != nil {
		t.Fatal(err)
	}
	asked := time.Now() // a reading asked now, answered after the clear
	if err := s.ClearCalendar(ctx, "wechat", []rule.Rule{day}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.SetCalendarUsed(ctx, "wechat", day, 950, 900, asked); err != nil || n != 0 {
		t.Fatalf("a count asked before the clear: %d, %v; want 0 kept", n, err)
	}
	if n, err := s.SetCalendarUsed(ctx, "wechat", day, 7, 0, time.Now().Add(2*time.Second)); err != nil || n != 7 {
		t.Fatalf("a count asked after the clear: %d, %v; want 7", n, err)
	}
}

// middayZone is a zone in which it is about noon now, so that a test's day
// window does not end while it runs.
func middayZone() *time.Location {
	now := time.Now().UTC()
	sinceMidnight := time.Duration(now.Hour())*time.Hour + time.Duration(now.Minute())*time.Minute
	offset := 12*time.Hour - sinceMidnight // noon there
	if offset > 12*time.Hour {
		offset -= 24 * time.Hour
	}
	return time.FixedZone("midday", int(offset.Seconds()))
}
