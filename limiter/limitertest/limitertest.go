package limitertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/rule"
)

// Factory returns n limiters sharing one state (n replicas on one store).
type Factory func(t *testing.T, n int) []limiter.Limiter

// Run runs the whole suite against the limiters the factory makes, but
// for the parts named in skip (a store that cannot keep one, saying why in
// its test: a Limiter answering with limiter.Admit skips "CancelCalendar",
// as its Reservations give back all or nothing).
func Run(t *testing.T, newLimiters Factory, skip ...string) {
	for _, p := range []struct {
		name string
		test func(*testing.T, Factory)
	}{
		{"ContextDone", testContextDone},
		{"NeverOver", testNeverOver},
		{"AllOrNone", testAllOrNone},
		{"Reservations", testReservations},
		{"Cancel", testCancel},
		{"Calendar", testCalendar},
		{"CancelCalendar", testCancelCalendar},
		{"Penalty", testPenalty},
		{"InvalidRequest", testInvalid},
		{"Concurrency", testConcurrency},
		{"Window", testWindow},
		{"WindowBursts", testWindowBursts},
		{"BookAheadChargesNothing", testBookAheadChargesNothing},
		{"BookAheadNeverOver", testBookAheadNeverOver},
	} {
		if slices.Contains(skip, p.name) {
			continue
		}
		t.Run(p.name, func(t *testing.T) { t.Parallel(); p.test(t, newLimiters) })
	}
}

// Group returns a group name unique to the test, so tests sharing a store
// never share keys.
func Group(t testing.TB) string {
	return fmt.Sprintf("t%d", rand.Uint64())
}

func pacedRule(t testing.TB, key string, limit int, period time.Duration, burst int) rule.Rule {
	t.Helper()
	r, err := rule.New(key, limit, period, rule.WithBurst(burst))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func reserve(t testing.TB, l limiter.Limiter, req limiter.Request) limiter.Reservation {
	t.Helper()
	res, err := l.Reserve(context.Background(), req)
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	return res
}

// Load drives replicas × workers goroutines against the limiters for d, each
// waiting out its delay like a transport would, and returns every scheduled
// send time (on the limiter's clock) in order.
func Load(t testing.TB, ls []limiter.Limiter, workers int, d time.Duration, req limiter.Request) []time.Time {
	t.Helper()
	var (
		mu    sync.Mutex
		sends []time.Time
		wg    sync.WaitGroup
		fail  = make(chan error, 1)
	)
	stop := time.Now().Add(d)
	for _, l := range ls {
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				timer := time.NewTimer(0)
				<-timer.C
				for time.Now().Before(stop) {
					res, err := l.Reserve(context.Background(), req)
					if err != nil {
						select {
						case fail <- err:
						default:
						}
						return
					}
					wait := res.RetryAfter()
					if res.OK() {
						mu.Lock()
						sends = append(sends, res.SendAt())
						mu.Unlock()
						wait = res.Delay()
					}
					timer.Reset(wait)
					<-timer.C
				}
			}()
		}
	}
	wg.Wait()
	select {
	case err := <-fail:
		t.Fatalf("Reserve under load: %v", err)
	default:
	}
	slices.SortFunc(sends, func(a, b time.Time) int { return a.Compare(b) })
	return sends
}

// MaxInWindow is the most send times that fall in any half-open window
// [t, t+period). The busiest window always starts at a send time.
func MaxInWindow(sends []time.Time, period time.Duration) (most int, at time.Time) {
	j := 0
	for i := range sends {
		for j < len(sends) && sends[j].Before(sends[i].Add(period)) {
			j++
		}
		if j-i > most {
			most, at = j-i, sends[i]
		}
	}
	return most, at
}

func testNeverOver(t *testing.T, newLimiters Factory) {
	cases := []struct {
		name  string
		rules []rule.Rule
	}{
		{"paced 20/s", []rule.Rule{pacedRule(t, "a", 20, time.Second, 1)}},
		{"burst 10 per 500ms, burst 5", []rule.Rule{pacedRule(t, "a", 10, 500*time.Millisecond, 5)}},
		{"odd 7/s burst 2", []rule.Rule{pacedRule(t, "a", 7, time.Second, 2)}},
		{"three rules at once", []rule.Rule{
			pacedRule(t, "per-api", 30, time.Second, 3),
			pacedRule(t, "per-app", 40, 2*time.Second, 10),
			pacedRule(t, "egress", 50, 3*time.Second, 1),
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ls := newLimiters(t, 3)
			req := limiter.Request{Group: Group(t), Rules: tc.rules, MaxWait: 300 * time.Millisecond}
			const d = 3 * time.Second
			sends := Load(t, ls, 8, d, req)
			if len(sends) == 0 {
				t.Fatal("nothing admitted")
			}
			for _, r := range tc.rules {
				if most, at := MaxInWindow(sends, r.Period()); most > r.Limit() {
					t.Errorf("rule %v: %d sends in the window starting at %v", r, most, at.Format(time.StampMicro))
				}
			}
			// Full rate: a lone paced rule with burst 1 and demand above it
			// admits at least 95% of Limit × duration / Period.
			if len(tc.rules) == 1 && !strings.Contains(tc.rules[0].String(), "burst") {
				r := tc.rules[0]
				from := sends[0]
				n := 0
				for _, s := range sends {
					if s.Before(from.Add(d - 300*time.Millisecond)) {
						n++
					}
				}
				want := float64(r.Limit()) * float64(d-300*time.Millisecond) / float64(r.Period())
				if float64(n) < 0.95*want {
					t.Errorf("full rate: admitted %d in %v, want at least 95%% of %.0f", n, d-300*time.Millisecond, want)
				}
			}
		})
	}
}

func testAllOrNone(t *testing.T, newLimiters Factory) {
	l := newLimiters(t, 1)[0]
	g := Group(t)
	tight := pacedRule(t, "tight", 1, 10*time.Second, 1)
	loose := pacedRule(t, "loose", 5, 10*time.Second, 5)
	both := limiter.Request{Group: g, Rules: []rule.Rule{loose, tight}}
	if res := reserve(t, l, both); !res.OK() {
		t.Fatalf("first request refused: %+v", res)
	}
	for i := 0; i < 3; i++ {
		res := reserve(t, l, both)
		if res.OK() {
			t.Fatalf("request %d admitted past the tight rule", i+2)
		}
		if res.Rule() != 1 {
			t.Errorf("refusal names rule %d, want 1 (tight)", res.Rule())
		}
	}
	// The refusals charged nothing: loose still has 4 of its 5.
	alone := limiter.Request{Group: g, Rules: []rule.Rule{loose}}
	for i := 0; i < 4; i++ {
		if res := reserve(t, l, alone); !res.OK() || res.Delay() != 0 {
			t.Fatalf("loose request %d: %+v, want admitted at once: a refusal charged it", i+1, res)
		}
	}
	if res := reserve(t, l, alone); res.OK() {
		t.Fatalf("sixth loose request admitted: %+v", res)
	}
}

func testReservations(t *testing.T, newLimiters Factory) {
	ls := newLimiters(t, 2)
	r := pacedRule(t, "r", 10, time.Second, 1) // T = 100ms
	req := limiter.Request{Group: Group(t), Rules: []rule.Rule{r}, MaxWait: time.Second}
	first := reserve(t, ls[0], req)
	if !first.OK() || first.Delay() != 0 {
		t.Fatalf("first: %+v, want admitted now", first)
	}
	second := reserve(t, ls[1], req)
	if !second.OK() {
		t.Fatalf("second: %+v, want a booked slot", second)
	}
	interval := time.Duration((r.Period().Microseconds()+int64(r.Limit())-1)/int64(r.Limit())) * time.Microsecond // rounded up to the µs, as the rule does
	if got := second.SendAt().Sub(first.SendAt()); got != interval {
		t.Errorf("second scheduled %v after the first, want exactly %v", got, interval)
	}
	if second.Rule() != 0 || second.Delay() <= 0 {
		t.Errorf("second: Rule %d Delay %v, want rule 0 and a positive delay", second.Rule(), second.Delay())
	}
	req.MaxWait = 50 * time.Millisecond
	refused := reserve(t, ls[0], req)
	if refused.OK() {
		t.Fatalf("third: %+v, want refused (needs ~200ms, may wait 50ms)", refused)
	}
	// Exact: the retry-after lands on the next free slot.
	if got, want := refused.SendAt().Add(refused.RetryAfter()), first.SendAt().Add(2*interval); !got.Equal(want) {
		t.Errorf("retry-after points at %v, want %v", got.Format(time.StampMicro), want.Format(time.StampMicro))
	}
	// And a caller who waits that long is admitted at once.
	time.Sleep(refused.RetryAfter()) // waiting for the clock is the behaviour under test
	req.MaxWait = time.Millisecond
	if again := reserve(t, ls[1], req); !again.OK() {
		t.Fatalf("after waiting RetryAfter: %+v, want admitted", again)
	}
}

func testCancel(t *testing.T, newLimiters Factory) {
	ls := newLimiters(t, 2)
	r := pacedRule(t, "r", 1, time.Second, 1)
	req := limiter.Request{Group: Group(t), Rules: []rule.Rule{r}, MaxWait: 5 * time.Second}
	ctx := context.Background()
	a := reserve(t, ls[0], req)
	b := reserve(t, ls[0], req)
	if !a.OK() || !b.OK() {
		t.Fatalf("a %+v, b %+v: want both booked", a, b)
	}
	if err := b.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
	c := reserve(t, ls[1], req)
	if !c.OK() || !c.SendAt().Equal(b.SendAt()) {
		t.Fatalf("after cancelling b, c is scheduled at %v, want b's slot %v", c.SendAt(), b.SendAt())
	}
	// A slot with another booked after it is kept: giving it back would
	// let the next caller in between two sends closer than the rule allows.
	d := reserve(t, ls[1], req)
	if err := c.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
	e := reserve(t, ls[0], req)
	if !d.OK() || !e.OK() || !e.SendAt().After(d.SendAt()) {
		t.Fatalf("d %v, e %v: e must come after d", d.SendAt(), e.SendAt())
	}
	// Cancelling a refusal is a no-op.
	req.MaxWait = 0
	refused := reserve(t, ls[0], req)
	if refused.OK() {
		t.Fatalf("want refused, got %+v", refused)
	}
	if err := refused.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
}

// zoneWithMidnightAt returns a fixed zone whose midnight falls at m.
func zoneWithMidnightAt(m time.Time) *time.Location {
	off := (86400 - int(m.Unix()%86400)) % 86400
	return time.FixedZone(fmt.Sprintf("midnight-at-%d", m.Unix()), off)
}

func testCalendar(t *testing.T, newLimiters Factory) {
	ls := newLimiters(t, 2)
	midnight := time.Now().Truncate(time.Second).Add(3 * time.Second)
	const grace = 250 * time.Millisecond
	loc := zoneWithMidnightAt(midnight)
	r, err := rule.NewCalendar("daily", 2, rule.Day, loc, rule.WithGrace(grace))
	if err != nil {
		t.Fatal(err)
	}
	boundary := midnight.Add(grace)
	req := limiter.Request{Group: Group(t), Rules: []rule.Rule{r}}
	for i := 0; i < 2; i++ {
		if res := reserve(t, ls[i%2], req); !res.OK() || res.Delay() != 0 {
			t.Fatalf("request %d of today's 2: %+v", i+1, res)
		}
	}
	refused := reserve(t, ls[0], req)
	if refused.OK() {
		t.Fatalf("third request today admitted: %+v", refused)
	}
	if got := refused.SendAt().Add(refused.RetryAfter()); !got.Equal(boundary) {
		t.Errorf("retry-after points at %v, want the next day's start %v", got.Format(time.StampMicro), boundary.Format(time.StampMicro))
	}
	// Tomorrow's window resets: a caller willing to wait books its start.
	req.MaxWait = 10 * time.Second
	for i := 0; i < 2; i++ {
		res := reserve(t, ls[i%2], req)
		if !res.OK() || !res.SendAt().Equal(boundary) {
			t.Fatalf("request %d for tomorrow: %+v, want booked at %v", i+1, res, boundary.Format(time.StampMicro))
		}
	}
	if res := reserve(t, ls[1], req); res.OK() {
		t.Fatalf("third request for tomorrow admitted: %+v", res)
	}
}

func testPenalty(t *testing.T, newLimiters Factory) {
	ls := newLimiters(t, 3)
	ctx := context.Background()
	g := Group(t)
	r := pacedRule(t, "r", 1, 10*time.Second, 1)
	until := time.Now().Add(700 * time.Millisecond).Truncate(time.Microsecond)
	if err := ls[0].Penalize(ctx, g, limiter.Penalty{Scope: "app:api", Until: until, Code: "90018"}); err != nil {
		t.Fatal(err)
	}
	// A shorter penalty never shortens the longer one.
	if err := ls[2].Penalize(ctx, g, limiter.Penalty{Scope: "app:api", Until: until.Add(-500 * time.Millisecond), Code: "x"}); err != nil {
		t.Fatal(err)
	}
	req := limiter.Request{Group: g, Rules: []rule.Rule{r}, Scopes: []string{"egress", "app:api"}, MaxWait: time.Minute}
	for i, l := range ls {
		res := reserve(t, l, req)
		if res.OK() || res.Penalty() == nil {
			t.Fatalf("replica %d: %+v, want refused by the penalty", i, res)
		}
		if p := res.Penalty(); p.Scope != "app:api" || p.Code != "90018" || !p.Until.Equal(until) {
			t.Errorf("replica %d: penalty %+v, want scope app:api code 90018 until %v", i, p, until)
		}
		if got := res.SendAt().Add(res.RetryAfter()); !got.Equal(until) {
			t.Errorf("replica %d: retry-after points at %v, want %v", i, got, until)
		}
	}
	// Other scopes are untouched, and the refusals charged nothing.
	other := limiter.Request{Group: g, Rules: []rule.Rule{r}, Scopes: []string{"egress"}}
	if res := reserve(t, ls[1], other); !res.OK() || res.Delay() != 0 {
		t.Fatalf("unpenalised scope: %+v, want admitted at once", res)
	}
	time.Sleep(time.Until(until)) // waiting for the penalty's end is the behaviour under test
	res := reserve(t, ls[2], req)
	if res.Penalty() != nil {
		t.Fatalf("after the end: still penalised %+v", res.Penalty())
	}
}

func testInvalid(t *testing.T, newLimiters Factory) {
	l := newLimiters(t, 1)[0]
	ctx := context.Background()
	long := string(make([]byte, rule.MaxKeyLen+1))
	cases := []struct {
		name string
		req  limiter.Request
	}{
		{"zero rule", limiter.Request{Group: "g", Rules: []rule.Rule{{}}}},
		{"negative wait", limiter.Request{Group: "g", MaxWait: -time.Second}},
		{"empty group", limiter.Request{Rules: []rule.Rule{pacedRule(t, "a", 1, time.Second, 1)}}},
		{"oversized scope", limiter.Request{Group: "g", Scopes: []string{long}}},
		// A brace in a group would end its keys' hash tag early: group
		// "a}:r:b" with rule "c" would share group "a"'s rule "b}:r:c".
		{"group with a brace", limiter.Request{Group: "a}:r:b", Rules: []rule.Rule{pacedRule(t, "c", 1, time.Hour, 1)}}},
		{"group with an opening brace", limiter.Request{Group: "{a", Rules: []rule.Rule{pacedRule(t, "c", 1, time.Hour, 1)}}},
		// One key is one state: some stores charged it twice, some once.
		{"two rules of one key", limiter.Request{Group: "g", Rules: []rule.Rule{pacedRule(t, "d", 1, time.Hour, 1), pacedRule(t, "e", 1, time.Hour, 1), pacedRule(t, "d", 2, time.Hour, 1)}}},
	}
	for _, tc := range cases {
		if _, err := l.Reserve(ctx, tc.req); !errors.Is(err, limiter.ErrInvalidRequest) {
			t.Errorf("%s: err %v, want ErrInvalidRequest", tc.name, err)
		}
	}
	if err := l.Penalize(ctx, "g", limiter.Penalty{Scope: "", Until: time.Now().Add(time.Second)}); !errors.Is(err, limiter.ErrInvalidRequest) {
		t.Errorf("empty penalty scope: err %v, want ErrInvalidRequest", err)
	}
	// A penalty past the year 9999 was stored, then read as corrupt and
	// lost by one limiter while another kept it.
	far := time.Date(40000, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := l.Penalize(ctx, "g", limiter.Penalty{Scope: "api", Until: far}); !errors.Is(err, limiter.ErrInvalidRequest) {
		t.Errorf("penalty until the year 40000: err %v, want ErrInvalidRequest", err)
	}
}

func testConcurrency(t *testing.T, newLimiters Factory) {
	ls := newLimiters(t, 2)
	ctx := context.Background()
	g := Group(t)
	cap2, err := rule.NewConcurrency("inflight", 2, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	tight := pacedRule(t, "tight", 1, 10*time.Second, 1)
	req := limiter.Request{Group: g, Rules: []rule.Rule{cap2}}
	a, b := reserve(t, ls[0], req), reserve(t, ls[1], req)
	if !a.OK() || !b.OK() {
		t.Fatalf("two leases of two: %+v %+v", a, b)
	}
	full := reserve(t, ls[0], req)
	if full.OK() || full.Rule() != 0 || full.RetryAfter() <= 0 || full.RetryAfter() > 100*time.Millisecond {
		t.Fatalf("third in flight: %+v, want refused by rule 0 with a short poll", full)
	}
	// Release frees a lease for the next caller, on any replica.
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	c := reserve(t, ls[1], req)
	if !c.OK() {
		t.Fatalf("after a release: %+v, want a lease", c)
	}
	// Cancel frees it too.
	if err := c.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
	// All or none: a refusal by another rule takes no lease.
	both := limiter.Request{Group: g, Rules: []rule.Rule{tight, cap2}}
	if res := reserve(t, ls[0], both); !res.OK() {
		t.Fatalf("tight + lease: %+v", res)
	}
	for i := 0; i < 3; i++ {
		if res := reserve(t, ls[1], both); res.OK() || res.Rule() != 0 {
			t.Fatalf("refused by tight: %+v", res)
		}
	}
	if res := reserve(t, ls[1], req); res.OK() {
		t.Fatalf("both leases are held (b and the tight one), got %+v", res)
	}

	// A lease not released (a crashed replica) lapses.
	short, err := rule.NewConcurrency("short", 1, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	sreq := limiter.Request{Group: g, Rules: []rule.Rule{short}}
	held := reserve(t, ls[0], sreq)
	if !held.OK() {
		t.Fatalf("first lease: %+v", held)
	}
	time.Sleep(60 * time.Millisecond) // the lease's lapse is the behaviour under test
	if res := reserve(t, ls[1], sreq); !res.OK() {
		t.Fatalf("after the lease lapsed: %+v, want a lease", res)
	}
}
