package throttle

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/providers"
)

// Headroom from measurement (providers.Headroom): each replica records the
// time from the moment a call's slot was booked for to the answer's
// headers, for every call of a profile that asks for it (from the slot, not
// from the send: a replica that wakes late for its slot, on a busy machine,
// crowds the provider's window as surely as the network does), in a ring of recent samples written without a lock.
// Every headroomEvery a goroutine of the Transport's own estimates the
// spread (the distance between the 2nd and 98th percentiles of the last
// headroomWindow), writes it to the group's hash in Redis under the
// replica's own field with an expiry, and reads back the largest live
// estimate: every replica of a rule then derives the same allowance, so the
// shared rule's arithmetic stays consistent (up to one round of the loop
// while the estimates move). A spread that grows is followed within a round
// or two (the larger of the whole window's estimate and the last 4 s's);
// one that shrinks is followed once the old samples leave the window.
const (
	headroomSamples = 1024             // the ring: the latest answers of the profile
	headroomWindow  = 20 * time.Second // samples older than this are ignored
	headroomRecent  = 4 * time.Second  // the recent samples that catch a growing spread early
	headroomMin     = 32               // fewer samples estimate nothing
	headroomEvery   = time.Second      // how often the estimate is shared
	headroomTTL     = 5 * headroomEvery
	headroomLowQ    = 0.02
	// headroomRebookRise is the least rise of the allowance that empties
	// some of the slots booked before it (vacated): a spread that grew (10
	// to 40 ms raises it by 30), not the estimate's step-or-two wobble,
	// which the allowance's margin covers.
	headroomRebookRise = 8 * time.Millisecond
	headroomHighQ      = 0.98
)

// headroomScript records a replica's estimate (ARGV[2] µs, "-" for none
// yet) under its field with an expiry (ARGV[3] ms) and returns the largest
// estimate of the fields still live, dropping the lapsed ones and those
// dated further ahead than any replica writes (before a failover to a
// master whose clock is behind, or by hand: kept, such an estimate held
// every replica's allowance up for as long). Redis's TIME is the clock, as
// everywhere in the limiter.
var headroomScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[3])
if ARGV[2] ~= '-' then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ':' .. (now + ttl))
end
local all = redis.call('HGETALL', KEYS[1])
local best = -1
for i = 1, #all, 2 do
  local v = all[i + 1]
  local c = string.find(v, ':', 1, true)
  local est, exp = tonumber(string.sub(v, 1, (c or 1) - 1)), tonumber(string.sub(v, (c or 0) + 1))
  if not c or not est or not exp or exp <= now or exp > now + ttl then
    redis.call('HDEL', KEYS[1], all[i])
  elseif est > best then
    best = est
  end
end
if #all > 0 then redis.call('PEXPIRE', KEYS[1], ttl * 2) end
return best
`)

// headroom is one profile's measurement and current allowance.
type headroom struct {
	spec  providers.Headroom
	name  string
	epoch time.Time

	// Each sample packs the milliseconds since epoch (upper 40 bits) and
	// the latency in µs (lower 24 bits, capped at 16.7 s).
	samples [headroomSamples]atomic.Uint64
	next    atomic.Uint64

	cur       atomic.Pointer[providers.Profile] // built with allowance
	allowance atomic.Int64                      // ns
}

// current is the allowance in force.
func (h *headroom) current() time.Duration { return time.Duration(h.allowance.Load()) }

// allowance is the profile's measured allowance, zero when it has none. A
// call reads it before routing: apply stores the rebuilt profile before
// the allowance, so a route built on the old rules never goes with the
// new allowance (which would hide the rise from vacated); the other way
// round, a slot is at worst emptied for nothing.
func (p *profile) allowance() time.Duration {
	if p.head == nil {
		return 0
	}
	return p.head.current()
}

// observe records one answer's latency: the only work on the request path.
func (h *headroom) observe(sent time.Time) {
	now := time.Now()
	us := min(uint64(max(now.Sub(sent), 0)/time.Microsecond), 1<<24-1)
	ms := uint64(now.Sub(h.epoch) / time.Millisecond)
	h.samples[h.next.Add(1)%headroomSamples].Store(ms<<24 | us)
}

// spread estimates the latency's spread from the samples of the last
// window; ok is false when there are too few. The larger of two estimates
// is taken: the whole window's, and the last headroomRecent's when it holds
// enough samples. A spread that grows shows in the recent samples at once,
// while in the whole window its high quantile rises only as the new samples
// come to outnumber its top 2% (measured: a refusal 3 s after the spread
// grew from 10 to 40 ms); a spread that shrinks is still followed only once
// the old samples leave the whole window.
func (h *headroom) spread(now time.Time) (d time.Duration, n int, ok bool) {
	since := int64(now.Add(-headroomWindow).Sub(h.epoch) / time.Millisecond)
	recentSince := int64(now.Add(-headroomRecent).Sub(h.epoch) / time.Millisecond)
	lat := make([]int64, 0, headroomSamples)
	var recent []int64
	for i := range h.samples {
		v := h.samples[i].Load()
		if v == 0 || int64(v>>24) < since {
			continue
		}
		lat = append(lat, int64(v&(1<<24-1)))
		if int64(v>>24) >= recentSince {
			recent = append(recent, int64(v&(1<<24-1)))
		}
	}
	if len(lat) < headroomMin {
		return 0, len(lat), false
	}
	d = quantileSpread(lat)
	if len(recent) >= headroomMin {
		d = max(d, quantileSpread(recent))
	}
	return d, len(lat), true
}

// quantileSpread is the distance between the low and high quantiles of
// lat (µs), which it sorts.
func quantileSpread(lat []int64) time.Duration {
	slices.Sort(lat)
	lo := lat[int(headroomLowQ*float64(len(lat)-1))]
	hi := lat[int(headroomHighQ*float64(len(lat)-1)+0.5)]
	return time.Duration(hi-lo) * time.Microsecond
}

// wrap makes p follow the allowance: its Route and Classify are those of
// the profile last built.
func (h *headroom) wrap(p *providers.Profile) {
	orig := *p
	h.cur.Store(&orig)
	h.allowance.Store(int64(h.spec.Initial))
	p.Route = func(req *http.Request) (providers.Route, error) { return h.cur.Load().Route(req) }
	if orig.Lower != nil {
		p.Lower = func(l providers.Learned) bool {
			if lower := h.cur.Load().Lower; lower != nil {
				return lower(l)
			}
			return false
		}
	}
	if orig.Classify != nil {
		p.Classify = func(req *http.Request, resp *http.Response, r *providers.Route) providers.Verdict {
			if c := h.cur.Load().Classify; c != nil {
				return c(req, resp, r)
			}
			return providers.Verdict{}
		}
	}
}

// apply moves the allowance to a, rebuilding the profile's rules, when it
// differs from the current one by a step or more (two steps downwards, so
// an estimate on the edge of a step does not flap).
func (h *headroom) apply(a, spread time.Duration, shared bool, log *slog.Logger) {
	old := h.current()
	if a == old || (a < old && old-a < 2*h.spec.Step) {
		return
	}
	p, err := h.spec.Rebuild(a)
	if err != nil {
		log.Warn("throttle: could not rebuild the rules for a new latency allowance", "provider", h.name,
			"allowance", a, "error", err)
		return
	}
	// The profile first, then the allowance: see profile.allowance.
	h.cur.Store(&p)
	h.allowance.Store(int64(a))
	log.Info("throttle: latency allowance changed", "provider", h.name, "from", old, "to", a,
		"spread", spread, "shared", shared)
}

// headroomLoop shares the estimates and applies the allowances of a
// Transport's profiles. It holds neither the Transport nor its profiles'
// breakers, so a dropped Transport can be collected.
type headroomLoop struct {
	heads    []*headroom
	learners []learner
	reading  atomic.Bool           // a read of the learned limits is under way
	rdb      redis.UniversalClient // nil: this replica's own estimate
	prefix   string
	keys     []string
	replica  string
	log      *slog.Logger
	// The rounds run on a timer re-armed by each, not on a goroutine of
	// their own: an idle or dropped Transport holds no goroutine.
	mu     sync.Mutex // guards timer and closed
	timer  *time.Timer
	closed bool
	busy   sync.Mutex     // held by a round; close waits for it
	pokes  sync.WaitGroup // reads started by pokeLearned; close waits for them
	gauge  metric.Registration
	report func(error)
}

// startHeadroom wraps the profiles that ask for a measured allowance and
// starts the loop that keeps it.
func (t *Transport) startHeadroom(c *config) error {
	var heads []*headroom
	for i := range t.profiles {
		p := &t.profiles[i]
		if p.Headroom == nil {
			continue
		}
		spec, err := headroomSpec(*p.Headroom)
		if err != nil {
			return fmt.Errorf("throttle: profile %q: %w", p.Name, err)
		}
		h := &headroom{spec: spec, name: p.Name, epoch: time.Now().Add(-time.Millisecond)}
		h.wrap(&p.Profile)
		p.head = h
		heads = append(heads, h)
	}
	var learners []learner
	for i := range t.profiles {
		if p := &t.profiles[i]; p.Lower != nil {
			learners = append(learners, learner{name: p.Name, lower: p.Lower, lowered: p.lowered,
				mu: new(sync.Mutex), seen: map[string]string{}, flooded: new(atomic.Bool)})
		}
	}
	if len(heads) == 0 && len(learners) == 0 {
		return nil
	}
	id := make([]byte, 8)
	_, _ = rand.Read(id)
	// The Redis the shared limiter is on (WithRedis built it already).
	var rdb redis.UniversalClient
	var prefix string
	if s, ok := c.limiter.(*limiter.Shared); ok {
		rdb, prefix = s.Client(), s.Config().Prefix
	}
	l := &headroomLoop{heads: heads, learners: learners, replica: hex.EncodeToString(id), log: c.logger,
		report: t.tel.report, prefix: prefix}
	if rdb != nil {
		l.rdb = rdb
		for _, h := range heads {
			l.keys = append(l.keys, "{"+prefix+":"+h.name+"}:headroom")
		}
	}
	if !t.tel.disabled && len(heads) > 0 {
		l.gauge = registerHeadroomGauge(t.tel.meterProvider, heads, t.tel.report)
	}
	t.head = l
	// Under mu: the first tick may run before AfterFunc returns, and it
	// re-arms the timer under mu.
	l.mu.Lock()
	l.timer = time.AfterFunc(headroomEvery, l.tick)
	l.mu.Unlock()
	runtime.AddCleanup(t, func(l *headroomLoop) { go l.close() }, l)
	return nil
}

// tick is one round for every profile, then the timer is re-armed.
func (l *headroomLoop) tick() {
	l.busy.Lock()
	// A timer that fired as close stopped it finds the loop closed: no
	// round runs after Close (its Redis client may be closed too).
	l.mu.Lock()
	closed := l.closed
	l.mu.Unlock()
	if closed {
		l.busy.Unlock()
		return
	}
	for i := range l.heads {
		l.round(i)
	}
	l.readLearned()
	l.busy.Unlock()
	l.mu.Lock()
	if !l.closed {
		l.timer.Reset(headroomEvery)
	}
	l.mu.Unlock()
}

// pokeLearned reads the learned limits now, off the caller (a penalty was
// announced, and the replica refused wrote its learned limit first); at
// most one such read runs at a time.
func (l *headroomLoop) pokeLearned() {
	if l == nil || l.rdb == nil || len(l.learners) == 0 || !l.reading.CompareAndSwap(false, true) {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed { // a penalty heard as the Transport closes: no read after Close
		l.reading.Store(false)
		return
	}
	l.pokes.Add(1)
	go func() {
		defer l.pokes.Done()
		defer l.reading.Store(false)
		l.readLearned()
	}()
}

// maxSharedSpread caps a latency spread read from Redis.
const maxSharedSpread = time.Minute

// round estimates, shares and applies the allowance of one profile.
func (l *headroomLoop) round(i int) {
	h := l.heads[i]
	spread, _, ok := h.spread(time.Now())
	shared := false
	if l.rdb != nil {
		arg := "-"
		if ok {
			arg = strconv.FormatInt(int64(spread/time.Microsecond), 10)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		best, err := headroomScript.Run(ctx, l.rdb, []string{l.keys[i]}, l.replica, arg, headroomTTL.Milliseconds()).Int64()
		cancel()
		switch {
		case err != nil && redis.HasErrorPrefix(err, "WRONGTYPE"):
			// Not an estimate of ours: replaced next round (kept, it
			// would freeze the allowance for good).
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			l.rdb.Del(ctx, l.keys[i])
			cancel()
			return
		case err != nil:
			// Redis is away: keep the allowance in force; the limiter's
			// own fallback decides what the rules mean meanwhile.
			l.log.Debug("throttle: could not share the latency estimate", "provider", h.name, "error", err)
			return
		case best >= 0:
			// A stored estimate past any real spread ("1e16" is a number
			// to Lua) is capped: it may raise the allowance to its
			// ceiling, never overflow into a negative spread.
			best = min(best, int64(maxSharedSpread/time.Microsecond))
			spread, ok, shared = time.Duration(best)*time.Microsecond, true, true
		}
	}
	if ok {
		h.apply(allowanceFor(h.spec, spread), spread, shared, l.log)
	}
}

func (l *headroomLoop) close() {
	if l == nil {
		return
	}
	l.mu.Lock()
	was := l.closed
	l.closed = true
	l.timer.Stop()
	l.mu.Unlock()
	if was {
		return
	}
	l.busy.Lock() // a round under way ends first
	l.busy.Unlock()
	l.pokes.Wait() // and a read poked before (each bounded at a second per provider)
	if l.gauge != nil {
		l.report(l.gauge.Unregister())
	}
}

// registerHeadroomGauge observes throttle.headroom.allowance, seconds, by
// provider.
func registerHeadroomGauge(mp metric.MeterProvider, heads []*headroom, report func(error)) metric.Registration {
	m := mp.Meter(instrumentationName)
	g, err := m.Float64ObservableGauge("throttle.headroom.allowance", metric.WithUnit("s"),
		metric.WithDescription("The allowance for latency that widens the provider's rule windows, measured and shared by the replicas."))
	report(err)
	if g == nil {
		return nil
	}
	sets := make([]metric.ObserveOption, len(heads))
	for i, h := range heads {
		sets[i] = metric.WithAttributeSet(attribute.NewSet(attribute.String("provider", h.name)))
	}
	reg, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for i, h := range heads {
			o.ObserveFloat64(g, h.current().Seconds(), sets[i])
		}
		return nil
	}, g)
	report(err)
	return reg
}

// Defaults of Headroom, stated in its fields' docs.
const (
	headroomDefaultFloor   = 5 * time.Millisecond
	headroomDefaultCeiling = 150 * time.Millisecond
	headroomDefaultStep    = 2 * time.Millisecond
	headroomDefaultMargin  = 5 * time.Millisecond
)

// headroomSpec returns a profile's Headroom with its defaults (stated in the
// fields' docs) filled in, or an error naming the field at fault.
func headroomSpec(h providers.Headroom) (providers.Headroom, error) {
	// A bound given alone moves the other's default to meet it: Ceiling
	// 3ms alone failed as below a Floor of 5ms never given.
	if h.Floor == 0 {
		h.Floor = headroomDefaultFloor
		if h.Ceiling > 0 {
			h.Floor = min(h.Floor, h.Ceiling)
		}
	}
	if h.Ceiling == 0 {
		h.Ceiling = max(headroomDefaultCeiling, h.Floor)
	}
	h.Step = cmp.Or(h.Step, headroomDefaultStep)
	h.Margin = cmp.Or(h.Margin, headroomDefaultMargin)
	h.Initial = cmp.Or(h.Initial, h.Ceiling)
	switch {
	case h.Rebuild == nil:
		return h, fmt.Errorf("Headroom.Rebuild must not be nil")
	case h.Step < 0 || h.Margin < 0:
		return h, fmt.Errorf("Headroom.Step and Headroom.Margin must not be negative, got %v and %v", h.Step, h.Margin)
	case h.Floor < 0:
		return h, fmt.Errorf("Headroom.Floor must not be negative, got %v", h.Floor)
	case h.Ceiling < h.Floor:
		return h, fmt.Errorf("Headroom.Ceiling (%v) must not be below Headroom.Floor (%v)", h.Ceiling, h.Floor)
	case h.Initial < h.Floor || h.Initial > h.Ceiling:
		return h, fmt.Errorf("Headroom.Initial must be within [Floor, Ceiling], got %v", h.Initial)
	}
	return h, nil
}

// allowanceFor turns a measured spread into the allowance: the spread plus
// Margin, rounded up to Step and held within [Floor, Ceiling]. Call it on
// a headroomSpec.
func allowanceFor(h providers.Headroom, spread time.Duration) time.Duration {
	a := spread + h.Margin
	if h.Step > 0 {
		if r := a % h.Step; r != 0 {
			a += h.Step - r
		}
	}
	return min(max(a, h.Floor), h.Ceiling)
}
