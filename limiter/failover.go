package limiter

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quotaware/throttle/limiter/rule"
)

// OutageMode says what a Shared limiter does while Redis does not answer.
type OutageMode int

const (
	// OutageLocal limits in-process with this replica's share of each rule
	// until Redis has answered well for a while. The default.
	OutageLocal OutageMode = iota
	// OutageRefuse refuses every request with an error wrapping
	// ErrUnavailable.
	OutageRefuse
	// OutageAdmit admits every request at once, unlimited.
	OutageAdmit
)

// failoverConfig configures a failover.
type failoverConfig struct {
	Mode OutageMode
	// Share returns the fraction of each rule this replica may use alone,
	// in (0, 1]; nil means 1.
	Share func() float64
	// Timeout bounds each call to the primary; zero leaves it to the
	// primary (the Redis limiter bounds its own calls, so that time queued
	// behind another call does not count).
	Timeout time.Duration
	// Probe is how often, while down, one request tries the primary again.
	Probe time.Duration
	// Recover is how long the primary must answer every probe before the
	// failover uses it again; it doubles (up to maxRecover) while the
	// primary keeps failing soon after coming back.
	Recover time.Duration
	// OnSwitch is told when the primary goes away (down true, with the
	// error) and when it is back; it runs once per switch.
	OnSwitch func(down bool, err error)
	// OnPenaltyLost is told when a penalty could not be written to the
	// primary and will not be written later (the queue of penalties taken
	// during an outage is full).
	OnPenaltyLost func(group string, p Penalty)
}

// failover is a Limiter that uses a primary (Redis) and, when the primary
// does not answer within its timeout, applies the configured mode until
// probes find the primary back for Recover. It switches back by itself.
type failover struct {
	primary store
	local   *Memory
	cfg     failoverConfig

	down      atomic.Bool
	nextProbe atomic.Int64 // unix nanos
	// lastErr is the primary's latest failure (an error), what a request
	// refused during an outage (OutageRefuse) names: "down" alone left
	// on-call without the address or the dial error behind it.
	lastErr  atomic.Pointer[error]
	switchMu sync.Mutex

	// Hysteresis: goodSince is when the probes began to succeed (unix
	// nanos, 0 while failing), recover the current Recover, upAt when the
	// primary last came back; trustBack lets the next good probe switch at
	// once, when another replica announced the primary back after its own
	// Recover.
	goodSince atomic.Int64
	recover   atomic.Int64
	upAt      atomic.Int64
	trustBack atomic.Bool

	// Penalties the primary did not take (it was away), written when it is
	// back; see Penalize.
	penMu     sync.Mutex
	penalties map[penaltyID]Penalty
	flushing  bool
	bg        sync.WaitGroup
	stop      chan struct{} // closed by close
	stopOnce  sync.Once

	// lastSlot is the latest send time (µs) the primary booked, for this
	// replica or (as its replies show) for others, and drainUntil what it
	// was when the primary went away:
	// local slots start after it, so the slots Redis already handed out
	// and the local ones do not pile up in one window.
	lastSlot   atomic.Int64
	drainUntil atomic.Int64
	// skew is how far (µs) the primary's clock was ahead of this
	// replica's in its last answer, beyond maxClockSkew (0 within it): the
	// holds are kept on this replica's clock, which the local limiter
	// reads, and moved to the primary's when sent to it.
	skew atomic.Int64
	// period is the longest period (µs) of the evenly paced rules and the
	// window rules seen, up to maxHold: the local slots start one such
	// period after the last Redis
	// slot, so that no window of a rule holds both Redis's slots and the
	// local ones, and Redis's first slots one period after the last local
	// one on the way back.
	period atomic.Int64
	// lastLocal is the latest local slot (µs), and upHold the time before
	// which this replica's Redis slots must not fall once Redis is back.
	lastLocal atomic.Int64
	upHold    atomic.Int64
	// lostHold is, after the primary lost its state (see stateLost), the
	// time before which no new slot may fall.
	lostHold atomic.Int64
	// windowHolds is, per window rule longer than maxHold (by group and
	// key), when its local share may start: one period after the latest
	// slot Redis booked for it, as this replica last saw. A window rule's
	// share may go in one burst, so unlike a paced rule's it must not meet
	// Redis's last burst inside one window.
	windowMu    sync.Mutex
	windowHolds map[string]int64

	// Scaled rules, built once per rule and share.
	scaledMu sync.Mutex
	scaled   map[scaledID]rule.Rule
}

// maxRecover caps the hysteresis: a primary that keeps failing right after
// coming back is used again at most about once a minute.
const maxRecover = time.Minute

// scaledID names a rule's local share: the whole rule, since rules of one
// key and limit may differ in every other field (two groups' "api" rules
// of 10 a second and 10 an hour).
type scaledID struct {
	rule  rule.Rule
	share float64
}

// maxHold caps the pause of a paced rule at a switch: a per-second rule
// gets its whole period, while holding a per-minute paced rule for a
// minute would stop the service; such rules rely on their local share
// alone across the switch. A window rule longer than maxHold is held by
// windowHolds instead: its share may go in one burst.
const maxHold = 2 * time.Second

// newFailover wraps primary; zero Probe and Recover take their defaults.
func newFailover(primary store, cfg failoverConfig) *failover {
	if cfg.Probe <= 0 {
		cfg.Probe = defaultProbe
	}
	if cfg.Recover == 0 {
		cfg.Recover = defaultRecover
	}
	f := &failover{primary: primary, local: NewMemory(), cfg: cfg, scaled: make(map[scaledID]rule.Rule),
		penalties: make(map[penaltyID]Penalty), stop: make(chan struct{})}
	f.recover.Store(int64(cfg.Recover))
	return f
}

// probeNow makes the next request try the primary again at once and, if
// it answers, use it again without waiting out Recover: another replica
// announced the primary back after its own Recover.
func (f *failover) probeNow() {
	if f.down.Load() {
		f.trustBack.Store(true)
		f.nextProbe.Store(0)
	}
}

// Down reports whether the primary is considered away.
func (f *failover) Down() bool { return f.down.Load() }

// Reserve implements Limiter.
func (f *failover) Reserve(ctx context.Context, req Request) (Reservation, error) {
	res, err := f.reserve(ctx, req)
	if err == nil && res.ok {
		if res.local && res.rules != nil {
			// A local slot goes back with the rules it was booked under,
			// its share of them: the live replicas may change meanwhile.
			res.from = f
		} else {
			res.settle(f, &req)
		}
	}
	return res, err
}

func (f *failover) reserve(ctx context.Context, req Request) (Reservation, error) {
	if err := ctx.Err(); err != nil {
		return Reservation{}, err
	}
	down := f.down.Load()
	if !down || f.probeDue() {
		began := time.Now()
		now := began.UnixMicro()
		// Back from limiting on its own, this replica's first Redis slots
		// wait for its local ones plus a period, as on the way down; after
		// Redis lost its state, for the slots it had booked before.
		for _, h := range []*atomic.Int64{&f.upHold, &f.lostHold} {
			if hold := h.Load(); hold > 0 {
				if hold > now {
					req.notBefore = max(req.notBefore, hold+f.skew.Load())
				} else {
					h.CompareAndSwap(hold, 0)
				}
			}
		}
		res, err := f.callPrimary(ctx, req, down)
		if err == nil && down && f.down.Load() && res.penalty == nil {
			// A good probe while Redis has not answered for long enough:
			// the replica stays on its local share, so the probe's slot
			// goes back (it would come on top of the share).
			if res.ok {
				_ = f.primary.cancel(ctx, req, res)
			}
			return f.reserveLocal(ctx, req.after(began))
		}
		if err == nil {
			f.noteHorizon(req, res) // refusals too: see fleetHorizon
		}
		if err == nil || !errors.Is(err, ErrUnavailable) || ctxEnded(ctx) != nil {
			return res, err
		}
		if f.cfg.Mode == OutageRefuse {
			return Reservation{}, err
		}
		return f.reserveLocal(ctx, req.after(began))
	}
	return f.reserveLocal(ctx, req)
}

// after is req as it stands when a local slot follows a primary call begun
// at began: its wait is what is left, as that call may have taken its whole
// timeout.
func (req Request) after(began time.Time) Request {
	req.MaxWait = max(req.MaxWait-time.Since(began), 0)
	return req
}

// reserveLocal applies the outage mode to req.
func (f *failover) reserveLocal(ctx context.Context, req Request) (Reservation, error) {
	switch f.cfg.Mode {
	case OutageRefuse:
		if last := f.lastErr.Load(); last != nil {
			return Reservation{}, fmt.Errorf("%w (refused without a call while it is down)", *last)
		}
		return Reservation{}, unavailable("reserve", errors.New("primary limiter is down"))
	case OutageAdmit:
		return Reservation{ok: true, ruleIndex: -1, now: time.Now(), local: true}, nil
	}
	lreq := f.share(req)
	lreq.notBefore = max(f.drainUntil.Load(), f.windowHold(&req))
	res, err := f.local.Reserve(ctx, lreq)
	res.local = true
	if err == nil && res.ok {
		at := res.SendAt().UnixMicro()
		for old := f.lastLocal.Load(); at > old && !f.lastLocal.CompareAndSwap(old, at); old = f.lastLocal.Load() {
		}
		// Were the primary back now, its slots would start after this one.
		f.upHold.Store(f.lastLocal.Load() + f.period.Load())
	}
	return res, err
}

// callPrimary makes one primary call (under the timeout, if the failover
// has one) and tracks whether the primary is up. probing is true when the
// primary is down and this call is the probe. A reservation the primary
// made after losing its state is given back and made again past the
// slots this replica knew were booked.
func (f *failover) callPrimary(ctx context.Context, req Request, probing bool) (Reservation, error) {
	cctx, cancel := ctx, context.CancelFunc(func() {})
	if f.cfg.Timeout > 0 {
		cctx, cancel = context.WithTimeout(ctx, f.cfg.Timeout)
	}
	defer cancel()
	res, err := f.primary.Reserve(cctx, req)
	if err == nil && res.lost {
		hold := f.lastSlot.Load() + f.period.Load()
		if at := hold + f.skew.Load(); at > req.notBefore {
			if res.ok {
				_ = f.primary.cancel(cctx, req, res)
			}
			f.lostHold.Store(max(f.lostHold.Load(), hold))
			req.notBefore = at
			res, err = f.primary.Reserve(cctx, req)
		}
	}
	switch {
	case err == nil:
		if probing {
			f.probeOK()
		}
	case ctxEnded(ctx) != nil:
		// The caller gave up: that says nothing about the primary.
	case errors.Is(err, ErrUnavailable) || errors.Is(err, context.DeadlineExceeded):
		f.goodSince.Store(0)
		f.nextProbe.Store(time.Now().Add(f.cfg.Probe).UnixNano())
		if !errors.Is(err, ErrUnavailable) {
			err = unavailable("reserve", err)
		}
		// A pointer to a copy no one writes again: the errors' types
		// differ (an atomic.Value panics), and err itself is the caller's.
		last := err
		f.lastErr.Store(&last)
		if !f.down.Load() {
			f.setDown(true, err)
		}
	}
	return res, err
}

// probeOK counts a good probe: the primary is used again once the probes
// have succeeded for Recover (hysteresis: an intermittent primary keeps
// the replica on its local share), or at once after another replica
// announced it back.
func (f *failover) probeOK() {
	now := time.Now().UnixNano()
	since := f.goodSince.Load()
	if since == 0 {
		f.goodSince.CompareAndSwap(0, now)
		since = now
	}
	if f.trustBack.Load() || f.recover.Load() <= 0 || now-since >= f.recover.Load() {
		f.setDown(false, nil)
		return
	}
	// Probe again soon, so that the switch happens once Recover is over,
	// not up to a probe interval later.
	f.nextProbe.Store(min(f.nextProbe.Load(), now+min(int64(f.cfg.Probe), f.recover.Load()/4+1)))
}

// probeDue lets one request at a time try the primary while it is down.
func (f *failover) probeDue() bool {
	next := f.nextProbe.Load()
	now := time.Now().UnixNano()
	return now >= next && f.nextProbe.CompareAndSwap(next, now+int64(f.cfg.Probe))
}

func (f *failover) setDown(down bool, err error) {
	f.switchMu.Lock()
	defer f.switchMu.Unlock()
	if f.down.Load() == down {
		return
	}
	now := time.Now().UnixNano()
	if down {
		f.drainUntil.Store(f.lastSlot.Load() + f.period.Load())
		// Failing again soon after coming back: wait longer next time.
		if up := f.upAt.Load(); up > 0 && now-up < int64(maxRecover) {
			// Never below Recover: a Recover above the cap was cut to it
			// by the first doubling.
			f.recover.Store(max(min(2*f.recover.Load(), int64(maxRecover)), int64(f.cfg.Recover)))
		} else {
			f.recover.Store(int64(f.cfg.Recover))
		}
	} else {
		f.upAt.Store(now)
		f.goodSince.Store(0)
		f.trustBack.Store(false)
	}
	f.down.Store(down)
	if f.cfg.OnSwitch != nil {
		f.cfg.OnSwitch(down, err)
	}
	if !down {
		f.flushPenalties()
	}
}

// share returns req with every rule cut to this replica's share, so that
// replicas limiting on their own still keep the provider's limit together.
func (f *failover) share(req Request) Request {
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
	rules := make([]rule.Rule, len(req.Rules))
	f.scaledMu.Lock()
	defer f.scaledMu.Unlock()
	if len(f.scaled) > 4096 {
		clear(f.scaled)
	}
	for i := range req.Rules {
		id := scaledID{req.Rules[i], share}
		s, ok := f.scaled[id]
		if !ok {
			s = scale(req.Rules[i], share)
			f.scaled[id] = s
		}
		rules[i] = s
	}
	req.Rules = rules
	return req
}

// cancel gives res back to whichever limiter granted the slot: a local
// slot with its share of req's rules (see Reserve).
func (f *failover) cancel(ctx context.Context, req Request, res Reservation) error {
	if res.local {
		if f.cfg.Mode == OutageAdmit {
			return nil
		}
		return f.local.cancel(ctx, req, res)
	}
	ctx, cancel := f.bound(ctx)
	defer cancel()
	return f.primary.cancel(ctx, req, res)
}

// release ends res's leases on whichever limiter granted the slot.
func (f *failover) release(ctx context.Context, req Request, res Reservation) error {
	if res.local {
		if f.cfg.Mode == OutageAdmit {
			return nil
		}
		return f.local.release(ctx, req, res)
	}
	ctx, cancel := f.bound(ctx)
	defer cancel()
	return f.primary.release(ctx, req, res)
}

func (f *failover) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if f.cfg.Timeout > 0 {
		return context.WithTimeout(ctx, f.cfg.Timeout)
	}
	return ctx, func() {}
}
