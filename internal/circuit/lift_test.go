package circuit_test

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotaware/throttle/internal/circuit"
)

func TestLift(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	cases := []struct {
		name      string
		penalise  bool
		advance   time.Duration // after the penalty, before the lift
		probe     bool          // a probe is in flight when the lift comes
		wantLift  bool
		wantEvent []circuit.State // from-states reported with to = Closed
	}{
		{name: "never penalised"},
		{name: "open", penalise: true, wantLift: true, wantEvent: []circuit.State{circuit.Open}},
		{name: "half-open", penalise: true, advance: 2 * time.Minute, wantLift: true, wantEvent: []circuit.State{circuit.HalfOpen}},
		{name: "half-open with a probe in flight", penalise: true, advance: 2 * time.Minute, probe: true, wantLift: true, wantEvent: []circuit.State{circuit.HalfOpen}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newClock(start)
			var mu sync.Mutex
			var closed []circuit.State
			s := newSet(t, c, circuit.WithOnStateChange(func(scope string, from, to circuit.State) {
				if to == circuit.Closed {
					mu.Lock()
					closed = append(closed, from)
					mu.Unlock()
				}
			}))
			if tc.penalise {
				s.Penalize("app:x", start.Add(time.Minute), "90018")
			}
			c.Advance(tc.advance)
			var probeDone func(circuit.Outcome)
			if tc.probe {
				probeDone = mustAllow(t, s, "app:x")
			}
			if got := s.Lift("app:x"); got != tc.wantLift {
				t.Fatalf("Lift = %v, want %v", got, tc.wantLift)
			}
			if s.Len() != 0 || s.State("app:x") != circuit.Closed {
				t.Fatalf("after Lift: Len %d, state %v; want 0, closed", s.Len(), s.State("app:x"))
			}
			// Every request of the scope goes at once, several together:
			// no probe stands in the way any more.
			for range 3 {
				done, err := s.Allow([]string{"app:x"})
				if err != nil {
					t.Fatalf("Allow after Lift: %v", err)
				}
				done(circuit.Success)
			}
			if probeDone != nil {
				probeDone(circuit.Success) // the old probe's outcome changes nothing
			}
			mu.Lock()
			defer mu.Unlock()
			if len(closed) != len(tc.wantEvent) || (len(closed) > 0 && closed[0] != tc.wantEvent[0]) {
				t.Fatalf("changes to closed reported from %v, want %v", closed, tc.wantEvent)
			}
			// A new penalty opens the scope again as usual.
			s.Penalize("app:x", c.Now().Add(time.Minute), "90018")
			if _, err := s.Allow([]string{"app:x"}); !errors.Is(err, circuit.ErrOpen) {
				t.Fatalf("Allow after a new penalty: %v, want ErrOpen", err)
			}
		})
	}
}

// Scopes lists the breakers whose scope and code the match accepts, open
// or half-open, and none that was lifted.
func TestScopesMatchesScopeAndCode(t *testing.T) {
	c := newClock(time.Unix(1_700_000_000, 0))
	s := newSet(t, c)
	s.Penalize("api:a:/x", c.Now().Add(time.Hour), "45009")
	s.Penalize("api:a:/y", c.Now().Add(time.Second), "45009")
	s.Penalize("api:a:/z", c.Now().Add(time.Hour), "45011")
	s.Penalize("api:b:/x", c.Now().Add(time.Hour), "45009")
	s.Penalize("api:a:/w", c.Now().Add(time.Hour), "45009")
	s.Lift("api:a:/w")
	c.Advance(2 * time.Second) // /y is half-open now
	got := s.Scopes(func(scope, code string) bool { return code == "45009" && strings.HasPrefix(scope, "api:a:") })
	slices.Sort(got)
	if want := []string{"api:a:/x", "api:a:/y"}; !slices.Equal(got, want) {
		t.Fatalf("Scopes = %v, want %v", got, want)
	}
}

// LiftIf closes a breaker only while it holds the penalty named: one
// extended since by a longer penalty, or of another code, stays open.
func TestLiftIf(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	c := newClock(start)
	s := newSet(t, c)
	end := start.Add(time.Hour)
	s.Penalize("api:x", end, "45009")
	if s.LiftIf("api:x", end, "45011") || s.LiftIf("api:x", end.Add(time.Second), "45009") || s.LiftIf("api:y", end, "45009") {
		t.Fatal("LiftIf lifted a penalty it did not name")
	}
	if s.State("api:x") != circuit.Open {
		t.Fatalf("state %v after LiftIf of other penalties, want open", s.State("api:x"))
	}
	longer := end.Add(time.Minute)
	s.Penalize("api:x", longer, "45009")
	if s.LiftIf("api:x", end, "45009") {
		t.Fatal("LiftIf lifted a breaker extended since by a longer penalty")
	}
	if !s.LiftIf("api:x", longer, "45009") || s.State("api:x") != circuit.Closed || s.Len() != 0 {
		t.Fatalf("LiftIf of the penalty held: state %v, %d breakers; want closed, 0", s.State("api:x"), s.Len())
	}
}

// The answer of a probe in flight is told to the requests waiting for it
// (Probing's channel): when the probe reports its outcome, and when its
// breaker is replaced by a new penalty or lifted, so that none waits for
// an answer that no longer decides anything.
func TestProbingTellsTheWaitersOfTheAnswer(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	for _, tc := range []struct {
		name   string
		answer func(s *circuit.Set, done func(circuit.Outcome))
		after  circuit.State
	}{
		{"the probe succeeds", func(_ *circuit.Set, done func(circuit.Outcome)) { done(circuit.Success) }, circuit.Closed},
		{"the probe fails otherwise", func(_ *circuit.Set, done func(circuit.Outcome)) { done(circuit.Ignored) }, circuit.HalfOpen},
		{"a new penalty", func(s *circuit.Set, _ func(circuit.Outcome)) { s.Penalize("app", start.Add(time.Hour), "88") }, circuit.Open},
		{"a lift", func(s *circuit.Set, _ func(circuit.Outcome)) { s.Lift("app") }, circuit.Closed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClock(start)
			s := newSet(t, c)
			if oe, ch := s.Probing([]string{"app"}); oe != nil || ch != nil {
				t.Fatalf("no breaker: Probing = %v, %v", oe, ch)
			}
			s.Penalize("app", start.Add(time.Minute), "90018")
			c.Advance(2 * time.Minute)
			done, err := s.Allow([]string{"app"})
			if err != nil {
				t.Fatal(err)
			}
			oe, answered := s.Probing([]string{"other", "app"})
			if answered == nil || oe == nil || !oe.Probing || oe.Scope != "app" {
				t.Fatalf("a probe in flight: Probing = %+v, %v", oe, answered)
			}
			select {
			case <-answered:
				t.Fatal("told of an answer before it came")
			default:
			}
			tc.answer(s, done)
			select {
			case <-answered:
			default:
				t.Fatal("the waiters were not told")
			}
			if got := s.State("app"); got != tc.after {
				t.Errorf("state after: %v, want %v", got, tc.after)
			}
		})
	}
}
