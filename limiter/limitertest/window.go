package limitertest

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/rule"
)

// Window rules ([rule.NewWindow]): the contract proven from the
// scheduled send times under bursty arrivals, and the share of what an
// exact sliding-window log would admit on the same arrivals.

func windowRule(t testing.TB, key string, limit int, period time.Duration) rule.Rule {
	t.Helper()
	r, err := rule.NewWindow(key, limit, period)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// testWindow checks a window rule's slots exactly: a burst goes at once,
// the next send waits for the oldest to leave the window, a refusal points
// at that slot, and Cancel gives back the latest slot only.
func testWindow(t *testing.T, newLimiters Factory) {
	ls := newLimiters(t, 2)
	ctx := context.Background()
	const period = time.Second
	r := windowRule(t, "w", 3, period)
	req := limiter.Request{Group: Group(t), Rules: []rule.Rule{r}}
	var first limiter.Reservation
	for i := 0; i < 3; i++ {
		res := reserve(t, ls[i%2], req)
		if !res.OK() || res.Delay() != 0 {
			t.Fatalf("send %d of a burst of 3: %+v, want admitted at once", i+1, res)
		}
		if i == 0 {
			first = res
		}
	}
	refused := reserve(t, ls[0], req)
	if refused.OK() || refused.Rule() != 0 {
		t.Fatalf("4th with no wait allowed: %+v, want refused by rule 0", refused)
	}
	if got, want := refused.SendAt().Add(refused.RetryAfter()), first.SendAt().Add(period); !got.Equal(want) {
		t.Errorf("retry-after points at %v, want a period after the first send, %v",
			got.Format(time.StampMicro), want.Format(time.StampMicro))
	}
	req.MaxWait = 2 * time.Second
	fourth := reserve(t, ls[1], req)
	if !fourth.OK() || !fourth.SendAt().Equal(first.SendAt().Add(period)) {
		t.Fatalf("4th: %+v, want booked a period after the first send", fourth)
	}
	// The latest slot comes back on Cancel and goes to the next caller.
	if err := fourth.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
	again := reserve(t, ls[0], req)
	if !again.OK() || !again.SendAt().Equal(fourth.SendAt()) {
		t.Fatalf("after cancelling the 4th: %+v, want its slot %v", again, fourth.SendAt().Format(time.StampMicro))
	}
	// A slot with another booked after it is kept.
	fifth := reserve(t, ls[1], req)
	if !fifth.OK() {
		t.Fatalf("5th: %+v, want booked", fifth)
	}
	if err := again.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
	sixth := reserve(t, ls[0], req)
	if !sixth.OK() || sixth.SendAt().Before(fifth.SendAt()) {
		t.Fatalf("6th at %v, 5th at %v: slots go in arrival order",
			sixth.SendAt().Format(time.StampMicro), fifth.SendAt().Format(time.StampMicro))
	}
	sends := []time.Time{first.SendAt(), again.SendAt(), fifth.SendAt(), sixth.SendAt()}
	slices.SortFunc(sends, func(a, b time.Time) int { return a.Compare(b) })
	if most, at := MaxInWindow(sends, period); most > 3 {
		t.Errorf("%d sends in the window starting at %v: the kept slot was given back", most, at.Format(time.StampMicro))
	}
}

// arrival is one request of a bursty load: when the limiter saw it and
// what it answered.
type arrival struct {
	now, sendAt time.Time
	ok          bool
	burst       int       // the index of its burst
	asked       time.Time // when Reserve was called, on this clock
}

// bursts fires bursts of the given sizes at random times within d, each
// request from a random replica and all of a burst's requests at once, and
// returns every answer. Bursts never wait out their delays: the scheduled
// send times are what the contract is proven from.
func bursts(t testing.TB, ls []limiter.Limiter, req limiter.Request, sizes []int, d time.Duration, rng *rand.Rand) []arrival {
	t.Helper()
	at := make([]time.Duration, len(sizes))
	for i := range at {
		at[i] = time.Duration(rng.Int64N(int64(d)))
	}
	slices.Sort(at)
	var (
		mu   sync.Mutex
		out  []arrival
		wg   sync.WaitGroup
		fail = make(chan error, 1)
	)
	start := time.Now()
	for b, size := range sizes {
		time.Sleep(time.Until(start.Add(at[b]))) // the arrival process, not synchronisation
		for range size {
			l := ls[rng.IntN(len(ls))]
			wg.Add(1)
			go func() {
				defer wg.Done()
				asked := time.Now()
				res, err := l.Reserve(context.Background(), req)
				// When the limiter decided, on its clock: the slot less the
				// wait still ahead, read at once (Delay counts from the
				// answer's arrival, so this is late by the microseconds
				// since then; a refusal's SendAt is the decision itself).
				now := res.SendAt().Add(-res.Delay())
				if err != nil {
					select {
					case fail <- err:
					default:
					}
					return
				}
				mu.Lock()
				out = append(out, arrival{now: now, sendAt: res.SendAt(), ok: res.OK(), burst: b, asked: asked})
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	select {
	case err := <-fail:
		t.Fatalf("Reserve in a burst: %v", err)
	default:
	}
	slices.SortFunc(out, func(a, b arrival) int { return a.now.Compare(b.now) })
	return out
}

// burstSpread is the longest time any burst's requests took to be asked
// of the limiter, from the first to the last, on the callers' clock: a
// limiter that answered slowly does not widen it.
func burstSpread(got []arrival, bursts int) time.Duration {
	first, last := make([]time.Time, bursts), make([]time.Time, bursts)
	var spread time.Duration
	for _, a := range got {
		b := a.burst
		if first[b].IsZero() || a.asked.Before(first[b]) {
			first[b] = a.asked
		}
		if a.asked.After(last[b]) {
			last[b] = a.asked
		}
		spread = max(spread, last[b].Sub(first[b]))
	}
	return spread
}

// ExactLogAdmits is how many of the arrivals (sorted by arrival time) an
// exact sliding-window log admits: each takes the earliest time at or after
// its arrival, within maxWait, where every window of length period holding
// it holds fewer than limit sends already booked, or is refused.
func ExactLogAdmits(arrivals []time.Time, limit int, period, maxWait time.Duration) int {
	var booked []time.Time // sorted
	// inWindow counts booked sends in [x, x+period).
	inWindow := func(x time.Time) int {
		lo, _ := slices.BinarySearchFunc(booked, x, func(a, b time.Time) int { return a.Compare(b) })
		hi, _ := slices.BinarySearchFunc(booked, x.Add(period), func(a, b time.Time) int { return a.Compare(b) })
		return hi - lo
	}
	// fits reports whether a send at t leaves every window within the limit:
	// the busiest window holding t starts just after t-period or at a send.
	fits := func(t time.Time) bool {
		if inWindow(t.Add(-period+time.Microsecond)) >= limit {
			return false
		}
		for _, b := range booked {
			if b.After(t.Add(-period)) && !b.After(t) && inWindow(b) >= limit {
				return false
			}
		}
		return true
	}
	admitted := 0
	for _, a := range arrivals {
		cands := []time.Time{a}
		for _, b := range booked {
			if c := b.Add(period); c.After(a) && !c.After(a.Add(maxWait)) {
				cands = append(cands, c)
			}
		}
		slices.SortFunc(cands, func(x, y time.Time) int { return x.Compare(y) })
		for _, c := range cands {
			if fits(c) {
				i, _ := slices.BinarySearchFunc(booked, c, func(x, y time.Time) int { return x.Compare(y) })
				booked = slices.Insert(booked, i, c)
				admitted++
				break
			}
		}
	}
	return admitted
}

// testWindowBursts fires bursts of 1, L/2, L and 3L at random times from
// three replicas and checks, from the scheduled send times, that no window
// of length Period holds more than Limit, and that the limiter admits
// nearly what an exact sliding-window log admits on the same arrivals.
func testWindowBursts(t *testing.T, newLimiters Factory) {
	cases := []struct {
		name   string
		limit  int
		period time.Duration
		// floor is the share of the exact log's admissions the limiter
		// must reach. An idle machine gives 100% in both cases. On a
		// loaded one a burst's requests reach the limiter spread over
		// tens of milliseconds and interleaved with the next burst; the
		// limiter books in arrival order (never before the latest slot it
		// booked) while the exact log places each send in any gap, and the
		// bucketed case then measured 85-93% now and then (a 95% floor
		// failed in two CI runs and in loaded runs of the code before and
		// after the rules moved to package rule). The exact-log case, with
		// about 35 admissions a run, once measured 33 (94%) in a loaded CI
		// stage: one request booked in arrival order behind a gap the log
		// filled. 90% there and 80% bucketed still fail a limiter that
		// wastes capacity.
		floor float64
	}{
		{"exact log, 10 per 500ms", 10, 500 * time.Millisecond, 0.90},
		{"bucketed, 200 per 500ms", 200, 500 * time.Millisecond, 0.80},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			seed := rand.Uint64()
			rng := rand.New(rand.NewPCG(seed, 0))
			ls := newLimiters(t, 3)
			r := windowRule(t, "bursty", tc.limit, tc.period)
			maxWait := tc.period / 2
			req := limiter.Request{Group: Group(t), Rules: []rule.Rule{r}, MaxWait: maxWait}
			L := tc.limit
			sizes := []int{1, L / 2, L, 3 * L, 1, L, L / 2, 3 * L, 1, L / 2}
			rng.Shuffle(len(sizes), func(i, j int) { sizes[i], sizes[j] = sizes[j], sizes[i] })
			got := bursts(t, ls, req, sizes, 4*tc.period, rng)

			var sends, arrivals []time.Time
			for _, a := range got {
				arrivals = append(arrivals, a.now)
				if a.ok {
					sends = append(sends, a.sendAt)
				}
			}
			slices.SortFunc(sends, func(a, b time.Time) int { return a.Compare(b) })
			if most, at := MaxInWindow(sends, tc.period); most > L {
				t.Errorf("seed %d: %d sends in the window of %v starting at %v, limit %d", seed, most, tc.period, at.Format(time.StampMicro), L)
			}
			for _, a := range got {
				if a.ok && a.sendAt.Sub(a.now) > maxWait {
					t.Errorf("seed %d: a send booked %v ahead, beyond the budget %v", seed, a.sendAt.Sub(a.now), maxWait)
				}
			}
			// Above a limit of 64 the log counts sends of one Period/64
			// bucket together, which may hold a send up to one bucket
			// longer than an exact log (rule.NewWindow's contract): compare
			// with an exact log whose budget is one bucket shorter, or a
			// burst arriving just inside the budget's edge counts as lost.
			slack := time.Duration(0)
			if L > 64 {
				slack = tc.period / 64
			}
			best := ExactLogAdmits(arrivals, L, tc.period, maxWait-slack)
			spread := burstSpread(got, len(sizes))
			t.Logf("seed %d: %d arrivals, admitted %d, exact log %d (budget %v); the widest burst was asked over %v", seed, len(got), len(sends), best, maxWait-slack, spread)
			// The floor compares bursts whose requests ask together. One
			// whose goroutines a loaded machine ran spread over more than a
			// tenth of the period mixes with the next, and the limiter books in
			// arrival order where the exact log fills any gap (62% seen
			// once beside other packages): the floor then says nothing of
			// the limiter, and is not checked. The limit and the budget
			// above always are.
			if spread > tc.period/10 {
				t.Logf("seed %d: more than a tenth of the period: the floor is not checked", seed)
				return
			}
			if float64(len(sends)) < tc.floor*float64(best) {
				t.Errorf("seed %d: admitted %d, want at least %.0f%% of the exact log's %d", seed, len(sends), 100*tc.floor, best)
			}
		})
	}
}
