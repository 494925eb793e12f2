package circuit_test

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotaware/throttle/internal/circuit"
)

// clock is a manual clock: tests step it across window ends instead of
// sleeping.
type clock struct{ now atomic.Int64 }

func newClock(t time.Time) *clock {
	c := &clock{}
	c.now.Store(t.UnixNano())
	return c
}

func (c *clock) Now() time.Time          { return time.Unix(0, c.now.Load()) }
func (c *clock) Set(t time.Time)         { c.now.Store(t.UnixNano()) }
func (c *clock) Advance(d time.Duration) { c.now.Add(int64(d)) }

func newSet(t testing.TB, c *clock, opts ...circuit.Option) *circuit.Set {
	t.Helper()
	s, err := circuit.New(append([]circuit.Option{circuit.WithClock(c.Now)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustAllow(t testing.TB, s *circuit.Set, scopes ...string) func(circuit.Outcome) {
	t.Helper()
	done, err := s.Allow(scopes)
	if err != nil {
		t.Fatalf("Allow(%q) = %v, want allowed", scopes, err)
	}
	return done
}

func mustRefuse(t testing.TB, s *circuit.Set, scopes ...string) *circuit.OpenError {
	t.Helper()
	done, err := s.Allow(scopes)
	if err == nil {
		done(circuit.Ignored)
		t.Fatalf("Allow(%q) allowed, want refused", scopes)
	}
	if !errors.Is(err, circuit.ErrOpen) {
		t.Fatalf("Allow(%q) = %v, want errors.Is ErrOpen", scopes, err)
	}
	var oe *circuit.OpenError
	if !errors.As(err, &oe) {
		t.Fatalf("Allow(%q) = %T, want *OpenError", scopes, err)
	}
	if done != nil {
		t.Errorf("refusal returned a non-nil done")
	}
	return oe
}

var shanghai = time.FixedZone("CST", 8*3600)

// A quota verdict opens its scope for exactly the window it names, however
// long; then one probe goes through, and its success closes the scope.
func TestWindowThenSingleProbe(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 23, 59, 30, 123456789, shanghai)
	cases := []struct {
		name  string
		until time.Time
	}{
		{"one second", t0.Add(time.Second)},
		{"next minute", t0.Truncate(time.Minute).Add(time.Minute)},
		{"five minutes", t0.Add(5 * time.Minute)},
		{"next midnight", time.Date(2026, 12, 1, 0, 0, 0, 0, shanghai)},
		{"next month", time.Date(2027, 1, 1, 0, 0, 0, 0, shanghai)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newClock(t0)
			s := newSet(t, c)
			const scope = "api:ding1:/v1.0/users"
			s.Penalize(scope, tc.until, "")

			oe := mustRefuse(t, s, scope)
			if oe.Scope != scope || !oe.Until.Equal(tc.until) || oe.Probing {
				t.Fatalf("refusal %+v, want scope %q open until %v", oe, scope, tc.until)
			}
			if got := s.State(scope); got != circuit.Open {
				t.Fatalf("State = %v, want open", got)
			}
			if n := s.Open(); n != 1 {
				t.Fatalf("Open() = %d, want 1", n)
			}
			// Other scopes are untouched.
			mustAllow(t, s, "api:ding1:/v1.0/depts")(circuit.Success)

			c.Set(tc.until.Add(-time.Nanosecond))
			mustRefuse(t, s, scope)

			c.Set(tc.until)
			if got := s.State(scope); got != circuit.HalfOpen {
				t.Fatalf("State at the window's end = %v, want half-open", got)
			}
			if n := s.Open(); n != 0 {
				t.Fatalf("Open() = %d after the window, want 0", n)
			}
			probe := mustAllow(t, s, scope)
			if oe := mustRefuse(t, s, scope); !oe.Probing {
				t.Fatalf("second request during the probe: %+v, want Probing", oe)
			}
			probe(circuit.Success)
			if got := s.State(scope); got != circuit.Closed {
				t.Fatalf("State after a successful probe = %v, want closed", got)
			}
			if n := s.Len(); n != 0 {
				t.Fatalf("Len = %d after closing, want 0: closed scopes hold no memory", n)
			}
			for i := 0; i < 3; i++ {
				mustAllow(t, s, scope)(circuit.Success)
			}
		})
	}
}

// What the probe reports decides what follows.
func TestProbeOutcome(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	cases := []struct {
		name    string
		finish  func(s *circuit.Set, done func(circuit.Outcome))
		want    circuit.State
		reopens time.Time // zero: not reopened
	}{
		{
			name:   "success closes",
			finish: func(s *circuit.Set, done func(circuit.Outcome)) { done(circuit.Success) },
			want:   circuit.Closed,
		},
		{
			name:   "cancelled or non-quota error frees the probe slot",
			finish: func(s *circuit.Set, done func(circuit.Outcome)) { done(circuit.Ignored) },
			want:   circuit.HalfOpen,
		},
		{
			name: "quota verdict reopens for the new window",
			finish: func(s *circuit.Set, done func(circuit.Outcome)) {
				s.Penalize("app:x", t0.Add(time.Hour), "")
				done(circuit.Ignored)
			},
			want:    circuit.Open,
			reopens: t0.Add(time.Hour),
		},
		{
			name: "late success of a reopened probe does not close the new window",
			finish: func(s *circuit.Set, done func(circuit.Outcome)) {
				s.Penalize("app:x", t0.Add(time.Hour), "")
				done(circuit.Success)
			},
			want:    circuit.Open,
			reopens: t0.Add(time.Hour),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newClock(t0)
			s := newSet(t, c)
			s.Penalize("app:x", t0.Add(time.Second), "")
			c.Advance(time.Second)
			tc.finish(s, mustAllow(t, s, "app:x"))
			if got := s.State("app:x"); got != tc.want {
				t.Fatalf("State = %v, want %v", got, tc.want)
			}
			switch tc.want {
			case circuit.Closed:
				mustAllow(t, s, "app:x")
				mustAllow(t, s, "app:x")
			case circuit.HalfOpen:
				probe := mustAllow(t, s, "app:x")
				mustRefuse(t, s, "app:x")
				probe(circuit.Success)
				mustAllow(t, s, "app:x")
			case circuit.Open:
				oe := mustRefuse(t, s, "app:x")
				if !oe.Until.Equal(tc.reopens) {
					t.Fatalf("reopened until %v, want %v", oe.Until, tc.reopens)
				}
				c.Set(tc.reopens.Add(-time.Nanosecond))
				mustRefuse(t, s, "app:x")
				c.Set(tc.reopens)
				probe := mustAllow(t, s, "app:x")
				mustRefuse(t, s, "app:x")
				probe(circuit.Success)
				mustAllow(t, s, "app:x")
			}
		})
	}
}

// done is honoured once: a second call must not free a probe slot that a
// newer probe holds.
func TestDoneOnce(t *testing.T) {
	c := newClock(time.Unix(1_800_000_000, 0))
	s := newSet(t, c)
	s.Penalize("s", c.Now().Add(time.Second), "")
	c.Advance(time.Second)
	first := mustAllow(t, s, "s")
	first(circuit.Ignored)
	second := mustAllow(t, s, "s")
	first(circuit.Ignored)
	first(circuit.Success)
	mustRefuse(t, s, "s")
	if got := s.State("s"); got != circuit.HalfOpen {
		t.Fatalf("State = %v, want half-open", got)
	}
	second(circuit.Success)
	if got := s.State("s"); got != circuit.Closed {
		t.Fatalf("State = %v, want closed", got)
	}
}

func TestPenalizeNeverShortens(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	cases := []struct {
		name  string
		ends  []time.Duration // successive Penalize calls, relative to t0
		until time.Duration   // 0: not penalised
	}{
		{"single", []time.Duration{time.Minute}, time.Minute},
		{"later extends", []time.Duration{time.Minute, time.Hour}, time.Hour},
		{"earlier is ignored", []time.Duration{time.Hour, time.Minute}, time.Hour},
		{"equal is ignored", []time.Duration{time.Hour, time.Hour}, time.Hour},
		{"past end changes nothing", []time.Duration{-time.Second}, 0},
		{"now changes nothing", []time.Duration{0}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newSet(t, newClock(t0))
			for _, d := range tc.ends {
				s.Penalize("s", t0.Add(d), "")
			}
			if tc.until == 0 {
				mustAllow(t, s, "s")
				if s.Len() != 0 {
					t.Fatalf("Len = %d, want 0", s.Len())
				}
				return
			}
			if oe := mustRefuse(t, s, "s"); !oe.Until.Equal(t0.Add(tc.until)) {
				t.Fatalf("open until %v, want %v", oe.Until, t0.Add(tc.until))
			}
		})
	}
}

// A request belongs to several scopes (its API, its app, the egress IP): it
// goes only when every one of them lets it.
func TestSeveralScopes(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	c := newClock(t0)
	s := newSet(t, c)
	s.Penalize("api", t0.Add(time.Second), "")
	s.Penalize("app", t0.Add(time.Minute), "")

	// The refusal names the scope that stays shut longest.
	if oe := mustRefuse(t, s, "egress", "api", "app"); oe.Scope != "app" || !oe.Until.Equal(t0.Add(time.Minute)) {
		t.Fatalf("refusal %+v, want app until +1m", oe)
	}
	c.Advance(time.Second)
	if oe := mustRefuse(t, s, "api", "app"); oe.Scope != "app" {
		t.Fatalf("refusal %+v, want app", oe)
	}
	// "api" is half-open, but a request also in "app" did not take its probe.
	probe := mustAllow(t, s, "api", "egress")
	mustRefuse(t, s, "api")
	probe(circuit.Ignored)

	c.Advance(time.Minute)
	// Both half-open: one request probes both, and a duplicate scope in
	// its list is not a second probe.
	probe = mustAllow(t, s, "api", "app", "api")
	mustRefuse(t, s, "api")
	mustRefuse(t, s, "app")
	probe(circuit.Success)
	for _, sc := range []string{"api", "app"} {
		if got := s.State(sc); got != circuit.Closed {
			t.Fatalf("State(%s) = %v, want closed", sc, got)
		}
	}

	// A refusal by a later scope gives back the probe taken in an earlier one.
	s.Penalize("a", c.Now().Add(time.Second), "")
	s.Penalize("b", c.Now().Add(time.Second), "")
	c.Advance(time.Second)
	holder := mustAllow(t, s, "b")
	if oe := mustRefuse(t, s, "a", "b"); oe.Scope != "b" || !oe.Probing {
		t.Fatalf("refusal %+v, want b probing", oe)
	}
	mustAllow(t, s, "a")(circuit.Success)
	holder(circuit.Success)
}

// A probe whose done never comes (a panicking caller) does not shut its
// scope for good.
func TestStuckProbe(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	c := newClock(t0)
	s := newSet(t, c, circuit.WithProbeTimeout(30*time.Second))
	s.Penalize("s", t0.Add(time.Second), "")
	c.Advance(time.Second)
	lost := mustAllow(t, s, "s")
	c.Advance(30*time.Second - time.Nanosecond)
	mustRefuse(t, s, "s")
	c.Advance(time.Nanosecond)
	next := mustAllow(t, s, "s")
	mustRefuse(t, s, "s")
	// The lost probe's late outcome belongs to the abandoned breaker.
	lost(circuit.Success)
	if got := s.State("s"); got != circuit.HalfOpen {
		t.Fatalf("State after the abandoned probe's success = %v, want half-open", got)
	}
	next(circuit.Success)
	if got := s.State("s"); got != circuit.Closed {
		t.Fatalf("State = %v, want closed", got)
	}
}

type change struct {
	scope    string
	from, to circuit.State
}

type recorder struct {
	mu      sync.Mutex
	changes []change
}

func (r *recorder) record(scope string, from, to circuit.State) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.changes = append(r.changes, change{scope, from, to})
}

func (r *recorder) take() []change {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.changes
	r.changes = nil
	return out
}

func TestStateChanges(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	c := newClock(t0)
	rec := &recorder{}
	s := newSet(t, c, circuit.WithOnStateChange(rec.record))
	s.Penalize("s", t0.Add(time.Second), "")
	s.Penalize("s", t0.Add(2*time.Second), "") // extension: still open
	c.Set(t0.Add(2 * time.Second))
	probe := mustAllow(t, s, "s")
	s.Penalize("s", t0.Add(time.Hour), "")
	probe(circuit.Ignored)
	c.Set(t0.Add(time.Hour))
	mustAllow(t, s, "s")(circuit.Success)

	want := []change{
		{"s", circuit.Closed, circuit.Open},
		{"s", circuit.Open, circuit.HalfOpen},
		{"s", circuit.HalfOpen, circuit.Open},
		{"s", circuit.Open, circuit.HalfOpen},
		{"s", circuit.HalfOpen, circuit.Closed},
	}
	got := rec.take()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("changes\n got %v\nwant %v", got, want)
	}
}

// With the default clock the window ends on real time. Waiting for the end of
// the window is the behaviour under test.
func TestRealClock(t *testing.T) {
	s, err := circuit.New()
	if err != nil {
		t.Fatal(err)
	}
	// Long enough that the first check cannot come after the end on a
	// loaded machine.
	until := time.Now().Add(300 * time.Millisecond)
	s.Penalize("s", until, "")
	mustRefuse(t, s, "s")
	time.Sleep(time.Until(until))
	probe := mustAllow(t, s, "s")
	mustRefuse(t, s, "s")
	probe(circuit.Success)
	mustAllow(t, s, "s")
}

func TestNewValidates(t *testing.T) {
	cases := []struct {
		name string
		opt  circuit.Option
	}{
		{"zero max scopes", circuit.WithMaxScopes(0)},
		{"negative max scopes", circuit.WithMaxScopes(-1)},
		{"zero probe timeout", circuit.WithProbeTimeout(0)},
		{"nil clock", circuit.WithClock(nil)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := circuit.New(tc.opt); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

func TestOpenErrorMessage(t *testing.T) {
	until := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		err  *circuit.OpenError
		want string
	}{
		{&circuit.OpenError{Scope: "app:x", Until: until}, `circuit: scope "app:x" is open until 2026-12-01T00:00:00Z`},
		{&circuit.OpenError{Scope: "app:x", Until: until, Probing: true}, `circuit: scope "app:x" is half-open and a probe is in flight`},
	}
	for _, tc := range cases {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
		wrapped := fmt.Errorf("send: %w", tc.err)
		var oe *circuit.OpenError
		if !errors.Is(wrapped, circuit.ErrOpen) || !errors.As(wrapped, &oe) || oe != tc.err {
			t.Errorf("wrapped %v does not match ErrOpen / *OpenError", wrapped)
		}
	}
}

func TestPenaltyLookup(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	s, err := circuit.New(circuit.WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok := s.Penalty("a"); ok {
		t.Fatal("a scope never penalised reports a penalty")
	}
	s.Penalize("a", now.Add(time.Second), "90018")
	if until, code, ok := s.Penalty("a"); !ok || code != "90018" || !until.Equal(now.Add(time.Second)) {
		t.Fatalf("Penalty = %v %q %v, want the open penalty", until, code, ok)
	}
	now = now.Add(time.Second)
	if _, _, ok := s.Penalty("a"); ok {
		t.Fatal("a penalty past its end is still reported")
	}
}
