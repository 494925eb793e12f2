package limiter

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// FailoverMode says what a Failover does while its primary limiter is away.
type FailoverMode int

const (
	// Local limits in-process with a share of each rule.
	Local FailoverMode = iota
	// Closed refuses with the primary's error (wrapping ErrUnavailable).
	Closed
	// Open admits everything at once.
	Open
)

// FailoverConfig configures a Failover.
type FailoverConfig struct {
	Mode FailoverMode
	// Share returns the fraction of each rule this replica may use alone,
	// in (0, 1]; nil means 1.
	Share func() float64
	// Timeout bounds each call to the primary (default 250ms).
	Timeout time.Duration
	// Probe is how often, while down, one request tries the primary again
	// (default 1s).
	Probe time.Duration
	// OnSwitch is told when the primary goes away (down true, with the
	// error) and when it is back; it runs once per switch.
	OnSwitch func(down bool, err error)
}

// Failover is a Limiter that uses a primary (Redis) and, when the primary
// does not answer within its timeout, applies the configured mode until a
// probe finds the primary back. It switches back by itself.
type Failover struct {
	primary Limiter
	local   *Memory
	cfg     FailoverConfig

	down      atomic.Bool
	nextProbe atomic.Int64 // unix nanos
	switchMu  sync.Mutex

	// lastSlot is the latest send time (µs) the primary booked, for this
	// replica or (as its replies show) for others, and drainUntil what it
	// was when the primary went away:
	// local slots start after it, so the slots Redis already handed out
	// and the local ones do not pile up in one window.
	lastSlot   atomic.Int64
	drainUntil atomic.Int64
	// period is the longest period (µs) of the evenly paced rules seen, up
	// to maxHold: the local slots start one such period after the last Redis
	// slot, so that no window of a rule holds both Redis's slots and the
	// local ones, and Redis's first slots one period after the last local
	// one on the way back.
	period atomic.Int64
	// lastLocal is the latest local slot (µs), and upHold the time before
	// which this replica's Redis slots must not fall once Redis is back.
	lastLocal atomic.Int64
	upHold    atomic.Int64

	// Scaled rules, built once per rule and share.
	scaledMu sync.Mutex
	scaled   map[scaledID]Rule
}

type scaledID struct {
	key   string
	limit int64
	unit  Unit
	share float64
}

// maxHold caps the pause at a switch: a per-second rule gets its whole
// period, while holding a per-minute rule for a minute would stop the
// service; such rules rely on their local share alone across the switch.
const maxHold = 2 * time.Second

// NewFailover wraps primary.
func NewFailover(primary Limiter, cfg FailoverConfig) *Failover {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 250 * time.Millisecond
	}
	if cfg.Probe <= 0 {
		cfg.Probe = time.Second
	}
	return &Failover{primary: primary, local: NewMemory(), cfg: cfg, scaled: make(map[scaledID]Rule)}
}

// ProbeNow makes the next request try the primary again at once, e.g. when
// another replica announces that Redis is back.
func (f *Failover) ProbeNow() {
	if f.down.Load() {
		f.nextProbe.Store(0)
	}
}

// Down reports whether the primary is considered away.
func (f *Failover) Down() bool { return f.down.Load() }

// Reserve implements Limiter.
func (f *Failover) Reserve(ctx context.Context, req Request) (Reservation, error) {
	if !f.down.Load() || f.probeDue() {
		// Back from limiting on its own, this replica's first Redis slots
		// wait for its local ones plus a period, as on the way down.
		if hold := f.upHold.Load(); hold > 0 {
			if hold > time.Now().UnixMicro() {
				req.notBefore = max(req.notBefore, hold)
			} else {
				f.upHold.CompareAndSwap(hold, 0)
			}
		}
		res, err := f.callPrimary(ctx, func(ctx context.Context) (Reservation, error) { return f.primary.Reserve(ctx, req) })
		if err == nil && res.OK {
			f.noteHorizon(req, res)
		}
		if err == nil || !errors.Is(err, ErrUnavailable) || ctx.Err() != nil {
			return res, err
		}
		if f.cfg.Mode == Closed {
			return Reservation{}, err
		}
	}
	switch f.cfg.Mode {
	case Closed:
		return Reservation{}, unavailable("reserve", errors.New("primary limiter is down"))
	case Open:
		return Reservation{OK: true, Rule: -1, Now: time.Now(), local: true}, nil
	}
	lreq := f.share(req)
	lreq.notBefore = f.drainUntil.Load()
	res, err := f.local.Reserve(ctx, lreq)
	res.local = true
	if err == nil && res.OK {
		at := res.SendAt().UnixMicro()
		for old := f.lastLocal.Load(); at > old && !f.lastLocal.CompareAndSwap(old, at); old = f.lastLocal.Load() {
		}
		// Were the primary back now, its slots would start after this one.
		f.upHold.Store(f.lastLocal.Load() + f.period.Load())
	}
	return res, err
}

// callPrimary runs one primary call under the timeout and tracks whether
// the primary is up.
func (f *Failover) callPrimary(ctx context.Context, call func(context.Context) (Reservation, error)) (Reservation, error) {
	cctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	res, err := call(cctx)
	cancel()
	switch {
	case err == nil:
		if f.down.Load() {
			f.setDown(false, nil)
		}
	case ctx.Err() != nil:
		// The caller gave up: that says nothing about the primary.
	case errors.Is(err, ErrUnavailable) || errors.Is(err, context.DeadlineExceeded):
		f.nextProbe.Store(time.Now().Add(f.cfg.Probe).UnixNano())
		if !f.down.Load() {
			f.setDown(true, err)
		}
		if !errors.Is(err, ErrUnavailable) {
			err = unavailable("reserve", err)
		}
	}
	return res, err
}

// noteHorizon keeps the latest slot the primary has booked, for this replica
// or, as far as this reservation shows, for any: an evenly paced rule's state
// after booking is its latest slot plus one interval, whoever booked it.
// (A rule with a burst runs its state ahead of the real sends, so only its
// own slot counts.)
func (f *Failover) noteHorizon(req Request, res Reservation) {
	at := res.SendAt().UnixMicro()
	if len(res.Booked) == len(req.Rules) {
		for i := range req.Rules {
			if r := &req.Rules[i]; r.kind == pacedRule && r.burst == 1 {
				at = max(at, res.Booked[i]-r.intervalUs)
				if p := int64(min(r.period, maxHold) / time.Microsecond); p > f.period.Load() {
					f.period.Store(p) // racy max: any recent value will do
				}
			}
		}
	}
	for old := f.lastSlot.Load(); at > old && !f.lastSlot.CompareAndSwap(old, at); old = f.lastSlot.Load() {
	}
}

// probeDue lets one request at a time try the primary while it is down.
func (f *Failover) probeDue() bool {
	next := f.nextProbe.Load()
	now := time.Now().UnixNano()
	return now >= next && f.nextProbe.CompareAndSwap(next, now+int64(f.cfg.Probe))
}

func (f *Failover) setDown(down bool, err error) {
	f.switchMu.Lock()
	defer f.switchMu.Unlock()
	if f.down.Load() == down {
		return
	}
	if down {
		f.drainUntil.Store(f.lastSlot.Load() + f.period.Load())
	}
	f.down.Store(down)
	if f.cfg.OnSwitch != nil {
		f.cfg.OnSwitch(down, err)
	}
}

// share returns req with every rule cut to this replica's share, so that
// replicas limiting on their own still keep the provider's limit together.
func (f *Failover) share(req Request) Request {
	share := 1.0
	if f.cfg.Share != nil {
		share = f.cfg.Share()
	}
	if share <= 0 || share > 1 {
		share = 1
	}
	if share == 1 || len(req.Rules) == 0 {
		return req
	}
	rules := make([]Rule, len(req.Rules))
	f.scaledMu.Lock()
	defer f.scaledMu.Unlock()
	if len(f.scaled) > 4096 {
		clear(f.scaled)
	}
	for i, r := range req.Rules {
		id := scaledID{r.key, r.limit, r.unit, share}
		s, ok := f.scaled[id]
		if !ok {
			s = r.scale(share)
			f.scaled[id] = s
		}
		rules[i] = s
	}
	req.Rules = rules
	return req
}

// Cancel implements Limiter, on whichever limiter granted the slot.
func (f *Failover) Cancel(ctx context.Context, req Request, res Reservation) error {
	if res.local {
		if f.cfg.Mode == Open {
			return nil
		}
		return f.local.Cancel(ctx, f.share(req), res)
	}
	cctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	defer cancel()
	return f.primary.Cancel(cctx, req, res)
}

// Release implements Limiter, on whichever limiter granted the slot.
func (f *Failover) Release(ctx context.Context, req Request, res Reservation) error {
	if res.local {
		if f.cfg.Mode == Open {
			return nil
		}
		return f.local.Release(ctx, f.share(req), res)
	}
	cctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	defer cancel()
	return f.primary.Release(cctx, req, res)
}

// Penalize implements Limiter. The penalty is kept locally as well, so it
// holds through an outage; the primary's error is returned.
func (f *Failover) Penalize(ctx context.Context, group string, p Penalty) error {
	if err := f.local.Penalize(ctx, group, p); err != nil {
		return err
	}
	if f.down.Load() {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	defer cancel()
	return f.primary.Penalize(cctx, group, p)
}

// scale cuts a rule to a share of its limit (at least 1), keeping its
// period, so n replicas with share 1/n admit no more than the whole rule.
func (r Rule) scale(share float64) Rule {
	limit := max(1, int(float64(r.limit)*share))
	switch r.kind {
	case concurrencyRule:
		s, err := NewConcurrencyRule(r.key, limit, r.period)
		if err != nil {
			return r
		}
		return s
	case calendarRule:
		s, err := NewCalendarRule(r.key, limit, r.unit, r.loc, WithGrace(r.grace))
		if err != nil {
			return r
		}
		return s
	case windowRule:
		s, err := NewWindowRule(r.key, limit, r.period)
		if err != nil {
			return r
		}
		return s
	}
	burst := min(limit, max(1, int(float64(r.burst)*share)))
	s, err := NewRule(r.key, limit, r.period, WithBurst(burst))
	if err != nil {
		return r
	}
	return s
}
