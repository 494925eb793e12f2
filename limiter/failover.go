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

	// lastSlot is the latest send time (µs) the primary booked for this
	// replica, and drainUntil what it was when the primary went away:
	// local slots start after it, so the slots Redis already handed out
	// and the local ones do not pile up in one window.
	lastSlot   atomic.Int64
	drainUntil atomic.Int64

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
		res, err := f.callPrimary(ctx, func(ctx context.Context) (Reservation, error) { return f.primary.Reserve(ctx, req) })
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
		if res.OK {
			at := res.SendAt().UnixMicro()
			for old := f.lastSlot.Load(); at > old && !f.lastSlot.CompareAndSwap(old, at); old = f.lastSlot.Load() {
			}
		}
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
		f.drainUntil.Store(f.lastSlot.Load())
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
	}
	burst := min(limit, max(1, int(float64(r.burst)*share)))
	s, err := NewRule(r.key, limit, r.period, WithBurst(burst))
	if err != nil {
		return r
	}
	return s
}
