package limiter

import (
	"errors"
	"testing"
	"time"
)

func TestNewWindowRuleValidation(t *testing.T) {
	cases := []struct {
		name   string
		limit  int
		period time.Duration
		field  string
	}{
		{"limit 0", 0, time.Minute, "Limit"},
		{"period 0", 5, 0, "Period"},
		{"negative period", 5, -time.Second, "Period"},
		{"sub-µs period", 5, time.Nanosecond, "Period"},
	}
	for _, tc := range cases {
		_, err := NewWindowRule("k", tc.limit, tc.period)
		var re *RuleError
		if !errors.As(err, &re) || re.Field != tc.field {
			t.Errorf("%s: err %v, want a RuleError on %s", tc.name, err, tc.field)
		}
	}
	r := MustRule(NewWindowRule("robot", 20, time.Minute))
	if !r.IsWindow() || r.Burst() != 20 || r.Interval() != 0 || r.String() != "robot: 20 in any 1m0s" {
		t.Errorf("rule %v: IsWindow %v Burst %d Interval %v", r, r.IsWindow(), r.Burst(), r.Interval())
	}
	if r.resolutionUs != 1 {
		t.Errorf("20/min keeps every send time, resolution %dµs", r.resolutionUs)
	}
	if big := MustRule(NewWindowRule("m", 1000, time.Minute)); big.resolutionUs != int64(time.Minute/time.Microsecond)/windowBuckets {
		t.Errorf("1000/min resolution %dµs, want a 64th of the minute", big.resolutionUs)
	}
	k, _ := r.WithKey("other")
	if !k.IsWindow() || k.periodUs != r.periodUs {
		t.Errorf("WithKey lost the window: %v", k)
	}
}

// A replica's local share of a window rule is a window rule with its share
// of the limit.
func TestWindowRuleScale(t *testing.T) {
	r := MustRule(NewWindowRule("robot", 20, time.Minute))
	s := r.scale(0.25)
	if !s.IsWindow() || s.Limit() != 5 || s.Period() != time.Minute {
		t.Fatalf("scaled %v, want a window rule of 5 per minute", s)
	}
}

// The log never holds more than windowMaxGroups groups, and merging the
// oldest only ever makes the next slot later.
func TestWindowLogBounded(t *testing.T) {
	const limit = 1000
	period := int64(time.Minute / time.Microsecond)
	exact := &windowLog{periodUs: period}
	capped := &windowLog{periodUs: period}
	for i := range 5000 {
		s := int64(i) * 9_000 // a send every 9 ms, each its own µs
		exact.at, exact.n = append(exact.at, s), append(exact.n, 1)
		capped.book(s, 1)
		if len(capped.at) > windowMaxGroups {
			t.Fatalf("%d groups after %d sends, bound %d", len(capped.at), i+1, windowMaxGroups)
		}
		if e, c := exact.earliest(limit), capped.earliest(limit); c < e {
			t.Fatalf("after %d sends: capped log allows %d, before the exact log's %d", i+1, c, e)
		}
	}
}

// Cancel gives back only the latest booking.
func TestWindowLogCancel(t *testing.T) {
	w := &windowLog{periodUs: 1_000_000}
	w.book(10, 1)
	w.book(20, 1)
	w.cancel(10) // not the latest: kept
	if len(w.at) != 2 {
		t.Fatalf("cancelling a booking with a later one removed it: %v %v", w.at, w.n)
	}
	w.cancel(20)
	if len(w.at) != 1 || w.at[0] != 10 {
		t.Fatalf("cancelling the latest: %v %v", w.at, w.n)
	}
}

func TestParseWindowLog(t *testing.T) {
	cases := []struct {
		v             string
		sends, latest int64
		ok            bool
	}{
		{"1700000000000000:3 250:1 1000:2", 6, 1700000000001250, true},
		{"1700000000000000:1", 1, 1700000000000000, true},
		{"1700000000000000", 0, 0, false}, // a paced rule's state
		{"17:x", 0, 0, false},
	}
	for _, tc := range cases {
		sends, latest, ok := parseWindowLog(tc.v)
		if sends != tc.sends || latest != tc.latest || ok != tc.ok {
			t.Errorf("%q: %d %d %v, want %d %d %v", tc.v, sends, latest, ok, tc.sends, tc.latest, tc.ok)
		}
	}
}
