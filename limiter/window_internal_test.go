package limiter

import (
	"testing"
	"time"

	"github.com/quotaware/throttle/limiter/internal/rulecore"
	"github.com/quotaware/throttle/limiter/rule"
)

// A replica's local share of a window rule is a window rule with its share
// of the limit.
func TestWindowRuleScale(t *testing.T) {
	r := rule.Must(rule.NewWindow("robot", 20, time.Minute))
	s := scale(r, 0.25)
	if core(&s).Kind != rulecore.Window || s.Limit() != 5 || s.Period() != time.Minute {
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
