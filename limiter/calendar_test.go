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

// SetCalendarUsed raises the current window's count to the provider's, plus
// what was booked since the caller read the count, and never lowers it; the
// reserve script then counts from there, so the rule refuses at the limit.
func TestSetCalendarUsed(t *testing.T) {
	srv := redistest.Shared(t)
	s := newShared(t, srv.Client(t), limiter.SharedConfig{Prefix: limitertest.Group(t), Mode: limiter.OutageRefuse, Timeout: 5 * time.Second})
	ctx := context.Background()
	day := rule.Must(rule.NewCalendar("day:wx:/cgi-bin/x", 10, rule.Day, time.FixedZone("CST", 8*3600)))
	reserve := func() bool {
		t.Helper()
		res, err := s.Reserve(ctx, limiter.Request{Group: "wechat", Rules: []rule.Rule{day}})
		if err != nil {
			t.Fatal(err)
		}
		return res.OK()
	}
	used := func() int64 {
		t.Helper()
		n, err := s.CalendarUsed(ctx, "wechat", []rule.Rule{day})
		if err != nil {
			t.Fatal(err)
		}
		return n[0]
	}
	reserve()
	// The window's first report counts none of the calls booked before it
	// (one, which may not have arrived yet): 2 reported, 3 counted.
	if n, err := s.SetCalendarUsed(ctx, "wechat", day, 2, -1, time.Now()); err != nil || n != 3 {
		t.Fatalf("first SetCalendarUsed(2) with 1 booked = %d, %v; want 3", n, err)
	}
	seen := used() // 3, before asking the provider again
	reserve()      // booked while the provider was asked
	// The provider counted 5 (ours it saw and another client's): the count
	// is 5 plus the one booked since.
	if n, err := s.SetCalendarUsed(ctx, "wechat", day, 5, seen, time.Now()); err != nil || n != 6 {
		t.Fatalf("SetCalendarUsed(5, seen 3) with 4 booked = %d, %v; want 6", n, err)
	}
	if got := used(); got != 6 {
		t.Fatalf("count after = %d, want 6", got)
	}
	// A lower report (it lags our calls) lowers nothing.
	if n, err := s.SetCalendarUsed(ctx, "wechat", day, 1, -1, time.Now()); err != nil || n != 6 {
		t.Fatalf("SetCalendarUsed(1) = %d, %v; want 6 kept", n, err)
	}
	admitted := 0
	for range 10 {
		if reserve() {
			admitted++
		}
	}
	if admitted != 4 {
		t.Fatalf("admitted %d after the count was set to 6 of 10, want 4", admitted)
	}
	paced := rule.Must(rule.New("p", 1, time.Second))
	if _, err := s.SetCalendarUsed(ctx, "wechat", paced, 1, -1, time.Now()); !errors.Is(err, limiter.ErrInvalidRequest) {
		t.Fatalf("a paced rule: %v, want ErrInvalidRequest", err)
	}
}

// A count asked of the provider in a window that has ended when it arrives
// (a reading in flight at midnight) is the old window's: it is refused and
// the new window keeps its own count. Applied to the window in force on
// arrival, it started the new day at the old day's count.
func TestSetCalendarUsedRefusesACountOfAnEndedWindow(t *testing.T) {
	srv := redistest.Shared(t)
	s := newShared(t, srv.Client(t), limiter.SharedConfig{Prefix: limitertest.Group(t), Mode: limiter.OutageRefuse, Timeout: 5 * time.Second})
	ctx := context.Background()
	day := rule.Must(rule.NewCalendar("day:wx:/cgi-bin/y", 10, rule.Day, time.FixedZone("CST", 8*3600)))
	if _, err := s.SetCalendarUsed(ctx, "wechat", day, 9, -1, time.Now().Add(-25*time.Hour)); !errors.Is(err, limiter.ErrWindowEnded) {
		t.Fatalf("a count asked yesterday: %v, want ErrWindowEnded", err)
	}
	if n, err := s.CalendarUsed(ctx, "wechat", []rule.Rule{day}); err != nil || n[0] != 0 {
		t.Fatalf("today's count after yesterday's reading: %v, %v; want 0", n, err)
	}
}
