package limiter

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/quotaware/throttle/limiter/internal/rulecore"
)

// Memory is a Limiter that keeps its state in this process. It keeps the same
// contract as the Redis limiter for one replica: use it when the service runs
// once, in tests, or as the fallback that holds a share of each rule while
// Redis is away.
type Memory struct {
	now func() time.Time

	mu        sync.Mutex
	paced     map[stateKey]int64 // theoretical arrival time, µs
	windows   map[stateKey]*windowLog
	calendar  map[stateKey]*calendarState
	leases    map[stateKey]map[int64]int64 // lease id → expiry, µs
	penalties map[stateKey]Penalty
	nextSweep int64
	// calendarDue is the earliest end of a calendar state (µs): the
	// calendar map, whose states last to their window's end (a month),
	// is swept only then, not every second: with 100,000 orgs' monthly
	// states the sweep held the lock 4-16 ms once a second.
	calendarDue int64
}

type stateKey struct{ group, key string }

type calendarState struct {
	counts   map[int64]int64 // window start (µs) → requests booked in it
	expireUs int64           // end of the latest booked window
	// cleared holds when ClearCalendar last started a window again (window
	// start → µs): a cancel of a booking made before it takes nothing
	// from the count, which holds only bookings made since.
	cleared map[int64]int64
}

// NewMemory returns an in-process Limiter.
func NewMemory() *Memory {
	m := &Memory{
		now:       time.Now,
		paced:     make(map[stateKey]int64),
		windows:   make(map[stateKey]*windowLog),
		calendar:  make(map[stateKey]*calendarState),
		leases:    make(map[stateKey]map[int64]int64),
		penalties: make(map[stateKey]Penalty),
	}
	return m
}

// sweepEvery bounds how long idle state outlives its usefulness.
const sweepEvery = int64(time.Second / time.Microsecond)

// Reserve implements Limiter: penalties first, then the earliest slot every
// rule allows, then the budget and the leases, and only then the booking.
func (m *Memory) Reserve(ctx context.Context, req Request) (Reservation, error) {
	if err := req.validate(); err != nil {
		return Reservation{}, err
	}
	if err := ctx.Err(); err != nil {
		return Reservation{}, err
	}
	clock := m.now()
	now := clock.UnixMicro()
	nowT := time.UnixMicro(now)

	m.mu.Lock()
	defer m.mu.Unlock()
	if now >= m.nextSweep {
		m.sweep(now)
	}
	if pen := m.penalty(req, now); pen != nil {
		return Reservation{retryAfter: pen.Until.Sub(nowT), ruleIndex: -1, penalty: pen, now: nowT}, nil
	}
	s, bind, held, heldUntil := m.earliest(req, now)
	if held >= 0 {
		// A rule capped by WithMaxBookAhead would book too far ahead:
		// nothing is charged, so the broader rules stay free for others.
		return Reservation{retryAfter: time.Duration(heldUntil-now) * time.Microsecond, ruleIndex: held, now: nowT}, nil
	}
	var bounds [][4]int64 // per calendar ruleIndex: its window starts around now
	if req.hasKind(rulecore.Calendar) {
		bounds = calendarBounds(req, clock)
		var refusedBy int
		if s, bind, refusedBy = m.fitCalendar(req, bounds, s, bind); refusedBy >= 0 {
			return Reservation{retryAfter: time.Duration(bounds[refusedBy][3]-now) * time.Microsecond, ruleIndex: refusedBy, now: nowT}, nil
		}
	}
	delay := s - now
	if delay > int64(req.MaxWait/time.Microsecond) {
		return Reservation{retryAfter: time.Duration(delay) * time.Microsecond, ruleIndex: bind, now: nowT}, nil
	}
	if i, retry := m.leasesFull(req, now); i >= 0 {
		return Reservation{retryAfter: retry, ruleIndex: i, now: nowT}, nil
	}
	// Delay counts down from the decision on the same clock, as Shared's
	// does from the answer, so a Wait made later does not sleep it again.
	return Reservation{ok: true, delay: time.Duration(delay) * time.Microsecond, ruleIndex: bind, now: nowT, booked: m.book(req, s, bounds),
		from: m, group: req.Group, rules: req.Rules, answered: clock, clock: m.now}, nil
}

// penalty is the request's shared penalty that ends last, or nil.
func (m *Memory) penalty(req Request, now int64) *Penalty {
	var pen Penalty
	found := false
	for _, s := range req.Scopes {
		// The latest penalty is copied out, so only a request that is
		// refused allocates one (taking &p here allocated every scope's).
		if p, ok := m.penalties[stateKey{req.Group, s}]; ok && p.Until.UnixMicro() > now {
			if !found || p.Until.After(pen.Until) {
				pen, found = p, true
			}
		}
	}
	if !found {
		return nil
	}
	return &pen
}

// earliest is the earliest send time that every paced and window rule
// allows, and the rule that set it (-1: none held the request back); held
// is the rule capped by WithMaxBookAhead whose own slot, heldUntil, lies
// beyond its cap (-1: none), the latest such.
func (m *Memory) earliest(req Request, now int64) (s int64, bind, held int, heldUntil int64) {
	s, bind, held = max(now, req.notBefore), -1, -1
	for i := range req.Rules {
		r := core(&req.Rules[i])
		var allow int64
		switch r.Kind {
		case rulecore.Paced:
			tat, ok := m.paced[stateKey{req.Group, r.Key}]
			if !ok || tat < now {
				continue
			}
			allow = tat - r.ToleranceUs
		case rulecore.Window:
			w := m.windows[stateKey{req.Group, r.Key}]
			if w == nil {
				continue
			}
			w.trim(now)
			allow = w.earliest(r.Limit)
		default:
			continue
		}
		if allow > s {
			s, bind = allow, i
		}
		if r.AheadCapped && allow-now > r.MaxAheadUs && allow > heldUntil {
			held, heldUntil = i, allow
		}
	}
	return s, bind, held, heldUntil
}

func (req *Request) hasKind(k rulecore.Kind) bool {
	for i := range req.Rules {
		if core(&req.Rules[i]).Kind == k {
			return true
		}
	}
	return false
}

// calendarBounds returns, for each calendar rule, the window starts around
// clock.
func calendarBounds(req Request, clock time.Time) [][4]int64 {
	bounds := make([][4]int64, len(req.Rules))
	for i := range req.Rules {
		if core(&req.Rules[i]).Kind == rulecore.Calendar {
			bounds[i] = core(&req.Rules[i]).Windows(clock)
		}
	}
	return bounds
}

// fitCalendar moves s to the start of a later window while a calendar
// rule's window at s is full. Moving s later never breaks a paced or window
// rule, so it repeats until every window fits. refusedBy is the calendar
// rule whose windows ran out (-1: none).
func (m *Memory) fitCalendar(req Request, bounds [][4]int64, s int64, bind int) (int64, int, int) {
	for moved := true; moved; {
		moved = false
		for i := range req.Rules {
			r := core(&req.Rules[i])
			if r.Kind != rulecore.Calendar {
				continue
			}
			w, end, ok := pickWindow(bounds[i], s)
			if !ok {
				return s, bind, i
			}
			if st := m.calendar[stateKey{req.Group, r.Key}]; st != nil && st.counts[w] >= r.Limit {
				s, bind, moved = end, i, true
			}
		}
	}
	return s, bind, -1
}

// leasesFull returns the first concurrency rule with no free lease and how
// soon to ask again, or -1.
func (m *Memory) leasesFull(req Request, now int64) (int, time.Duration) {
	for i := range req.Rules {
		r := core(&req.Rules[i])
		if r.Kind != rulecore.Concurrency {
			continue
		}
		held := m.leases[stateKey{req.Group, r.Key}]
		earliest := int64(-1)
		for id, exp := range held {
			if exp <= now {
				delete(held, id)
			} else if earliest < 0 || exp < earliest {
				earliest = exp
			}
		}
		if int64(len(held)) >= r.Limit {
			return i, concurrencyRetry(earliest - now)
		}
	}
	return -1, 0
}

// book charges every rule for a send at s and returns what each rule
// booked, for Cancel.
func (m *Memory) book(req Request, s int64, bounds [][4]int64) []int64 {
	booked := make([]int64, len(req.Rules))
	for i := range req.Rules {
		r := core(&req.Rules[i])
		k := stateKey{req.Group, r.Key}
		switch r.Kind {
		case rulecore.Paced:
			booked[i] = max(m.paced[k], s) + r.IntervalUs
			m.paced[k] = booked[i]
		case rulecore.Window:
			w := m.windows[k]
			if w == nil {
				w = &windowLog{periodUs: r.PeriodUs}
				m.windows[k] = w
			}
			w.book(s, r.ResolutionUs)
			booked[i] = s
		case rulecore.Concurrency:
			held := m.leases[k]
			if held == nil {
				held = make(map[int64]int64)
				m.leases[k] = held
			}
			booked[i] = newLeaseID()
			held[booked[i]] = s + r.LeaseUs
		case rulecore.Calendar:
			booked[i] = m.bookCalendar(k, r, bounds[i], s)
		}
	}
	return booked
}

// bookCalendar counts a send at s in its calendar window and returns the
// window's start.
func (m *Memory) bookCalendar(k stateKey, r *rulecore.Rule, bounds [4]int64, s int64) int64 {
	w, end, _ := pickWindow(bounds, s)
	st := m.calendar[k]
	if st == nil {
		st = &calendarState{counts: make(map[int64]int64, 2)}
		m.calendar[k] = st
	}
	st.counts[w]++
	st.expireUs = max(st.expireUs, end)
	if m.calendarDue == 0 || st.expireUs < m.calendarDue {
		m.calendarDue = st.expireUs
	}
	// Windows before the current one can no longer be booked.
	for old := range st.counts {
		if old < bounds[1] {
			delete(st.counts, old)
		}
	}
	for old := range st.cleared {
		if old < bounds[1] {
			delete(st.cleared, old)
		}
	}
	return w
}

// cancel gives res back (see Reservation.Cancel).
func (m *Memory) cancel(_ context.Context, req Request, res Reservation) error {
	if !res.ok || len(res.booked) != len(req.Rules) {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range req.Rules {
		r := core(&req.Rules[i])
		k := stateKey{req.Group, r.Key}
		switch r.Kind {
		case rulecore.Paced:
			if tat, ok := m.paced[k]; ok && tat == res.booked[i] {
				m.paced[k] = tat - r.IntervalUs
			}
			continue
		case rulecore.Window:
			if w := m.windows[k]; w != nil {
				w.cancel(res.booked[i])
			}
			continue
		case rulecore.Concurrency:
			delete(m.leases[k], res.booked[i])
			continue
		}
		st := m.calendar[k]
		if st == nil || st.counts[res.booked[i]] <= 0 {
			continue
		}
		if at, ok := st.cleared[res.booked[i]]; ok && at >= res.now.UnixMicro() {
			continue // booked before the window was started again
		}
		st.counts[res.booked[i]]--
	}
	return nil
}

// release ends res's leases (see Reservation.Release).
func (m *Memory) release(_ context.Context, req Request, res Reservation) error {
	if !res.ok || len(res.booked) != len(req.Rules) {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range req.Rules {
		if core(&req.Rules[i]).Kind == rulecore.Concurrency {
			delete(m.leases[stateKey{req.Group, req.Rules[i].Key()}], res.booked[i])
		}
	}
	return nil
}

// Penalize implements Limiter.
func (m *Memory) Penalize(_ context.Context, group string, p Penalty) error {
	if err := p.validate(group); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	k := stateKey{group, p.Scope}
	if old, ok := m.penalties[k]; ok && !p.supersedes(old) {
		return nil
	}
	m.penalties[k] = p
	return nil
}

// forgetPenalty drops group's penalty p while it is the one held (same
// end, code and send): one recorded since stays.
func (m *Memory) forgetPenalty(group string, p Penalty) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := stateKey{group, p.Scope}
	if old, ok := m.penalties[k]; ok && old.is(p) {
		delete(m.penalties, k)
	}
}

// size is how many keys the limiter holds, for leak checks.
func (m *Memory) size() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sweep(m.now().UnixMicro())
	return len(m.paced) + len(m.windows) + len(m.calendar) + len(m.penalties) + len(m.leases)
}

// sweep drops state that no longer constrains anything, so that keys built
// from many distinct paths do not accumulate.
func (m *Memory) sweep(now int64) {
	for k, tat := range m.paced {
		if tat <= now {
			delete(m.paced, k)
		}
	}
	for k, w := range m.windows {
		if w.expiry() <= now {
			delete(m.windows, k)
		}
	}
	if m.calendarDue != 0 && m.calendarDue <= now {
		m.calendarDue = 0
		for k, st := range m.calendar {
			switch {
			case st.expireUs <= now:
				delete(m.calendar, k)
			case m.calendarDue == 0 || st.expireUs < m.calendarDue:
				m.calendarDue = st.expireUs
			}
		}
	}
	for k, p := range m.penalties {
		if p.Until.UnixMicro() <= now {
			delete(m.penalties, k)
		}
	}
	for k, held := range m.leases {
		for id, exp := range held {
			if exp <= now {
				delete(held, id)
			}
		}
		if len(held) == 0 {
			delete(m.leases, k)
		}
	}
	m.nextSweep = now + sweepEvery
}

// concurrencyPoll is how soon a request refused for want of a lease asks
// again: leases end when answers arrive, which no limiter can foresee.
const concurrencyPoll = 20 * time.Millisecond

func concurrencyRetry(untilExpiryUs int64) time.Duration {
	if d := time.Duration(untilExpiryUs) * time.Microsecond; d > 0 && d < concurrencyPoll {
		return d
	}
	return concurrencyPoll
}

// newLeaseID names one in-flight request's lease.
func newLeaseID() int64 { return rand.Int64N(1<<53-1) + 1 }

// pickWindow finds the calendar window holding t among four consecutive
// window starts; ok is false when t lies beyond the windows known.
func pickWindow(b [4]int64, t int64) (start, end int64, ok bool) {
	for j := 0; j < 3; j++ {
		if t >= b[j] && t < b[j+1] {
			return b[j], b[j+1], true
		}
	}
	return 0, 0, false
}
