package throttle

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/providers"
)

// testHeadroom is a headroom whose Rebuild records the allowances asked for.
func testHeadroom(t *testing.T, name string) (*headroom, *[]time.Duration) {
	t.Helper()
	var built []time.Duration
	spec, err := headroomSpec(providers.Headroom{Initial: 50 * time.Millisecond, Rebuild: func(a time.Duration) (providers.Profile, error) {
		built = append(built, a)
		return providers.Profile{Name: name, Route: func(*http.Request) (providers.Route, error) {
			return providers.Route{API: a.String()}, nil
		}}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	h := &headroom{spec: spec, name: name, epoch: time.Now().Add(-time.Second)}
	p := providers.Profile{Name: name, Route: func(*http.Request) (providers.Route, error) { return providers.Route{API: "initial"}, nil }}
	h.wrap(&p)
	return h, &built
}

// fill records n answers whose latencies, measured from their slots, are
// spread evenly over [base, base+spread].
func fill(h *headroom, n int, base, spread time.Duration) {
	for i := range n {
		h.observe(time.Now().Add(-base - spread*time.Duration(i)/time.Duration(n-1)))
	}
}

func TestHeadroomSpreadIsBetweenQuantiles(t *testing.T) {
	h, _ := testHeadroom(t, "p")
	fill(h, headroomMin-1, 0, 0)
	if _, n, ok := h.spread(time.Now()); ok {
		t.Fatalf("%d samples gave an estimate, want none under %d", n, headroomMin)
	}
	h, _ = testHeadroom(t, "p")
	fill(h, 1000, 100*time.Millisecond, 40*time.Millisecond)
	d, n, ok := h.spread(time.Now())
	// The 2nd to 98th percentiles of an even spread of 40 ms: 38.4 ms,
	// plus the clock reads between the samples (well under a millisecond).
	if !ok || n != 1000 || d < 37*time.Millisecond || d > 40*time.Millisecond {
		t.Fatalf("spread = %v over %d samples (ok %v), want about 38.4ms over 1000", d, n, ok)
	}
	// Samples older than the window are ignored.
	if _, n, ok := h.spread(time.Now().Add(headroomWindow + time.Second)); ok || n != 0 {
		t.Fatalf("%d samples counted a window later, want 0", n)
	}
}

// A spread that grows shows in the estimate at once: 950 answers of a
// 10 ms spread 10 s ago, then 50 of a 40 ms spread now. The whole window's
// 98th percentile is still about 24 ms; the recent samples' is the new
// spread.
func TestHeadroomFollowsAGrowingSpreadAtOnce(t *testing.T) {
	h, _ := testHeadroom(t, "p")
	fill(h, 950, 0, 10*time.Millisecond)
	h.epoch = h.epoch.Add(-10 * time.Second) // those answers came 10 s ago
	fill(h, 50, 0, 40*time.Millisecond)
	d, n, ok := h.spread(time.Now())
	if !ok || n != 1000 || d < 35*time.Millisecond {
		t.Fatalf("spread = %v over %d samples (ok %v), want the new 40 ms spread (at least 35 ms)", d, n, ok)
	}
}

func TestHeadroomAllowanceBoundedAndQuantised(t *testing.T) {
	spec, _ := headroomSpec(providers.Headroom{Rebuild: func(time.Duration) (providers.Profile, error) { return providers.Profile{}, nil }})
	for _, c := range []struct{ spread, want time.Duration }{
		{0, 6 * time.Millisecond},                        // the 5 ms margin, up to the step
		{9500 * time.Microsecond, 16 * time.Millisecond}, // 14.5 ms rounded up to the 2 ms step
		{38 * time.Millisecond, 44 * time.Millisecond},   // 43 ms, up to 44
		{time.Second, 150 * time.Millisecond},
	} {
		if got := allowanceFor(spec, c.spread); got != c.want {
			t.Errorf("Allowance(%v) = %v, want %v", c.spread, got, c.want)
		}
	}
	// A bound given alone moves the other's default to meet it.
	for _, h := range []providers.Headroom{{Ceiling: 3 * time.Millisecond}, {Floor: 200 * time.Millisecond}} {
		h.Rebuild = spec.Rebuild
		got, err := headroomSpec(h)
		if err != nil || got.Floor > got.Ceiling {
			t.Errorf("headroomSpec(Floor %v, Ceiling %v) = %v, %v", h.Floor, h.Ceiling, got, err)
		}
	}
	for _, bad := range []providers.Headroom{
		{},
		{Floor: -1, Rebuild: spec.Rebuild},
		{Floor: 10 * time.Millisecond, Ceiling: 5 * time.Millisecond, Rebuild: spec.Rebuild},
		{Initial: time.Second, Rebuild: spec.Rebuild},
	} {
		if _, err := headroomSpec(bad); err == nil {
			t.Errorf("headroomSpec(%+v) accepted it", bad)
		}
	}
}

// Two replicas on one Redis: the one that measured nothing yet and the one
// that measured a small spread both take the largest live estimate, and the
// profile's Route follows the rebuilt profile.
func TestHeadroomSharedLargestLiveEstimate(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	quiet := slog.New(slog.DiscardHandler)
	key := "{throttle-test:p}:headroom"
	mk := func(id string) (*headroomLoop, *headroom, *[]time.Duration) {
		h, built := testHeadroom(t, "p")
		return &headroomLoop{heads: []*headroom{h}, rdb: rdb, keys: []string{key}, replica: id, log: quiet}, h, built
	}
	a, ha, builtA := mk("a")
	b, hb, builtB := mk("b")
	c, hc, _ := mk("c")
	fill(ha, 200, time.Millisecond, 30*time.Millisecond)
	fill(hb, 200, time.Millisecond, 5*time.Millisecond)
	a.round(0)
	b.round(0)
	c.round(0) // nothing measured: reads only
	want := allowanceFor(ha.spec, time.Duration(ha.must(t))*time.Microsecond)
	for name, h := range map[string]*headroom{"a": ha, "b": hb, "c": hc} {
		if got := time.Duration(h.allowance.Load()); got != want {
			t.Errorf("replica %s: allowance %v, want the largest estimate's %v", name, got, want)
		}
		r, _ := h.cur.Load().Route(nil)
		if r.API != want.String() {
			t.Errorf("replica %s: Route is the profile built for %q, want %v", name, r.API, want)
		}
	}
	if len(*builtA) != 1 || len(*builtB) != 1 {
		t.Errorf("rebuilt %d and %d times, want once each", len(*builtA), len(*builtB))
	}
	// A replica's entry lapses: set a's to have expired, and b's smaller
	// estimate (two steps below and more) takes over.
	if err := rdb.HSet(t.Context(), key, "a", "30000:1").Err(); err != nil {
		t.Fatal(err)
	}
	b.round(0)
	if n, _ := rdb.HLen(t.Context(), key).Result(); n != 1 {
		t.Errorf("the hash holds %d entries after a lapsed one was read, want 1 (b's)", n)
	}
	if got, want := time.Duration(hb.allowance.Load()), allowanceFor(hb.spec, 5*time.Millisecond); got > want+hb.spec.Step {
		t.Errorf("b's allowance %v after a's estimate lapsed, want about %v", got, want)
	}
}

// must is h's spread in µs, failing t when there is none.
func (h *headroom) must(t *testing.T) int64 {
	d, _, ok := h.spread(time.Now())
	if !ok {
		t.Fatal("no estimate")
	}
	return int64(d / time.Microsecond)
}

// BenchmarkHeadroomObserve is the cost a measured allowance adds to a
// request: one clock read and one atomic store.
func BenchmarkHeadroomObserve(b *testing.B) {
	h := &headroom{epoch: time.Now()}
	slot := time.Now()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			h.observe(slot)
		}
	})
}

// A stored estimate may only raise the allowance: one past any real spread
// ("1e16", a number to Lua) overflowed into a negative spread and sent every
// replica to the floor. A key of another type is replaced rather than
// freezing the allowance for good.
func TestHeadroomSharedEstimateOutOfRange(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	key := "{throttle-test:p}:headroom"
	h, _ := testHeadroom(t, "p")
	l := &headroomLoop{heads: []*headroom{h}, rdb: rdb, keys: []string{key}, replica: "a", log: slog.New(slog.DiscardHandler)}
	fill(h, 200, time.Millisecond, 30*time.Millisecond)
	l.round(0)
	before := time.Duration(h.allowance.Load())
	if err := rdb.HSet(t.Context(), key, "x", "1e16:1e15").Err(); err != nil {
		t.Fatal(err)
	}
	l.round(0)
	if got := time.Duration(h.allowance.Load()); got < before {
		t.Fatalf("allowance %v after a huge estimate appeared, want at least the %v before", got, before)
	}

	if err := rdb.Set(t.Context(), key, "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	h2, _ := testHeadroom(t, "p")
	l.heads[0] = h2
	fill(h2, 200, time.Millisecond, 10*time.Millisecond)
	l.round(0) // replaces the key
	l.round(0)
	if got, want := time.Duration(h2.allowance.Load()), allowanceFor(h2.spec, time.Duration(h2.must(t))*time.Microsecond); got != want {
		t.Fatalf("allowance %v with the key of another type, want its own estimate's %v", got, want)
	}
}

// An estimate dated further ahead than any replica writes (a failover to a
// master whose clock is behind, or a hand's write) is dropped, not taken
// as the fleet's largest: it used to hold every replica's allowance up
// until Redis's clock reached it.
func TestHeadroomDropsEstimatesFromTheFuture(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	key := "{headroom-future:p}:headroom"
	far := strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)
	if err := rdb.HSet(ctx, key, "ghost", "5000000:"+far).Err(); err != nil {
		t.Fatal(err)
	}
	best, err := headroomScript.Run(ctx, rdb, []string{key}, "me", "1000", headroomTTL.Milliseconds()).Int64()
	if err != nil {
		t.Fatal(err)
	}
	if best != 1000 {
		t.Fatalf("largest estimate %d µs, want this replica's 1000 (the one an hour ahead dropped)", best)
	}
	if rdb.HExists(ctx, key, "ghost").Val() {
		t.Fatal("the estimate an hour ahead is still in the hash")
	}
}
