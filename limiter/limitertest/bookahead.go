package limitertest

import (
	"testing"
	"time"

	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/rule"
)

// Rules capped by [rule.WithMaxBookAhead]: a narrow rule (one entity
// among many sharing broader rules) holds its requests back without
// booking the broader rules ahead, and still never goes over its limit.

func cappedRule(t testing.TB, window bool, key string, limit int, period, ahead time.Duration) rule.Rule {
	t.Helper()
	var (
		r   rule.Rule
		err error
	)
	if window {
		r, err = rule.NewWindow(key, limit, period, rule.WithMaxBookAhead(ahead))
	} else {
		r, err = rule.New(key, limit, period, rule.WithMaxBookAhead(ahead))
	}
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// testBookAheadChargesNothing: entity A's second request, held back by A's
// capped rule, is refused with the time until A's slot and charges
// nothing, so entity B's request gets the shared capacity at once. An
// uncapped rule would have booked the shared rule at A's slot, two seconds
// ahead, and B would wait behind it. A cap longer than the wait books as
// before.
func testBookAheadChargesNothing(t *testing.T, newLimiters Factory) {
	const (
		narrowPeriod = 2 * time.Second // one send per entity per 2 s
		sharedPeriod = 100 * time.Millisecond
	)
	cases := []struct {
		name   string
		window bool // narrow and shared rules are window rules, not paced
		ahead  time.Duration
		refuse bool
	}{
		{"paced, never ahead", false, 0, true},
		{"paced, 10ms ahead", false, 10 * time.Millisecond, true},
		{"paced, cap above the wait", false, 3 * time.Second, false},
		{"window, never ahead", true, 0, true},
		{"window, cap above the wait", true, 3 * time.Second, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ls := newLimiters(t, 2)
			g := Group(t)
			var shared rule.Rule
			if tc.window {
				shared = windowRule(t, "shared", 1, sharedPeriod)
			} else {
				shared = pacedRule(t, "shared", 1, sharedPeriod, 1)
			}
			a := cappedRule(t, tc.window, "entity:a", 1, narrowPeriod, tc.ahead)
			b := cappedRule(t, tc.window, "entity:b", 1, narrowPeriod, tc.ahead)
			reqA := limiter.Request{Group: g, Rules: []rule.Rule{shared, a}, MaxWait: 5 * time.Second}
			reqB := limiter.Request{Group: g, Rules: []rule.Rule{shared, b}, MaxWait: 5 * time.Second}

			first := reserve(t, ls[0], reqA)
			if !first.OK() || first.Delay() != 0 {
				t.Fatalf("A's first request: %+v, want admitted at once", first)
			}
			second := reserve(t, ls[1], reqA)
			if !tc.refuse {
				if !second.OK() || !second.SendAt().Equal(first.SendAt().Add(narrowPeriod)) {
					t.Fatalf("A's second request: %+v, want booked a period after the first (the cap allows it)", second)
				}
				return
			}
			if second.OK() {
				t.Fatalf("A's second request: %+v, want refused: its own slot is 2s ahead, beyond the cap", second)
			}
			if second.Rule() != 1 || second.Penalty() != nil {
				t.Errorf("refusal names rule %d (penalty %v), want 1 (entity A's capped rule)", second.Rule(), second.Penalty())
			}
			if got, want := second.SendAt().Add(second.RetryAfter()), first.SendAt().Add(narrowPeriod); !got.Equal(want) {
				t.Errorf("retry-after points at %v, want A's own slot %v",
					got.Format(time.StampMicro), want.Format(time.StampMicro))
			}
			// The refusal charged nothing: B goes on the shared rule's
			// next slot, at most one shared period away, not behind a slot
			// booked for A two seconds ahead.
			other := reserve(t, ls[1], reqB)
			if !other.OK() {
				t.Fatalf("B's request: %+v, want admitted", other)
			}
			if other.Delay() > sharedPeriod {
				t.Errorf("B waits %v, want at most the shared period %v: "+
					"A's refused request booked the shared rule ahead", other.Delay(), sharedPeriod)
			}
		})
	}
}

// testBookAheadNeverOver drives one entity's capped rule beside a looser
// shared rule from several replicas, each caller asking again after its
// RetryAfter like the Transport does, and checks from the scheduled send
// times that the capped rule never goes over its limit.
func testBookAheadNeverOver(t *testing.T, newLimiters Factory) {
	cases := []struct {
		name   string
		window bool
		ahead  time.Duration
	}{
		{"paced 10/s, never ahead", false, 0},
		{"paced 10/s, 5ms ahead", false, 5 * time.Millisecond},
		{"window 10/s, never ahead", true, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ls := newLimiters(t, 3)
			narrow := cappedRule(t, tc.window, "entity", 10, time.Second, tc.ahead)
			shared := pacedRule(t, "shared", 100, time.Second, 10)
			req := limiter.Request{Group: Group(t), Rules: []rule.Rule{shared, narrow}, MaxWait: time.Second}
			const d = 2 * time.Second
			sends := Load(t, ls, 4, d, req)
			if len(sends) <= narrow.Limit() {
				t.Fatalf("%d sends in %v, want more than one window's %d: the callers were starved", len(sends), d, narrow.Limit())
			}
			if most, at := MaxInWindow(sends, narrow.Period()); most > narrow.Limit() {
				t.Errorf("rule %v: %d sends in the window starting at %v", narrow, most, at.Format(time.StampMicro))
			}
		})
	}
}
