package circuit

import (
	"container/heap"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"
)

// Defaults.
const (
	// DefaultMaxScopes bounds the live breakers of a Set.
	DefaultMaxScopes = 10_000
	// DefaultProbeTimeout is how long a probe may stay unanswered before
	// another request may probe in its place.
	DefaultProbeTimeout = time.Minute
)

// Option configures a Set.
type Option func(*config)

type config struct {
	maxScopes     int
	probeTimeout  time.Duration
	now           func() time.Time
	onStateChange func(scope string, from, to State)
}

// WithMaxScopes bounds the number of live breakers (default
// [DefaultMaxScopes]). Only penalised scopes hold a breaker; when a new
// penalty finds the Set full, the breaker whose window ends first is dropped
// (expired windows go before open ones). Dropping one is safe with the shared
// limiter in front: its Redis penalty still refuses the scope.
func WithMaxScopes(n int) Option { return func(c *config) { c.maxScopes = n } }

// WithProbeTimeout sets how long a half-open scope waits for its probe's
// outcome before letting another request probe (default
// [DefaultProbeTimeout]). It guards against a done that is never called (a
// panicking caller), which would otherwise keep the scope shut for good. Set
// it above the longest request the caller may send.
func WithProbeTimeout(d time.Duration) Option { return func(c *config) { c.probeTimeout = d } }

// WithClock sets the clock penalty windows are measured on (default
// time.Now). Tests use it to step through a window without sleeping.
func WithClock(now func() time.Time) Option { return func(c *config) { c.now = now } }

// WithOnStateChange registers fn to hear of every state change of a scope,
// for logs and metrics. It is called synchronously, outside the Set's locks,
// possibly from several goroutines at once, so it must be fast and safe for
// concurrent use. Open→HalfOpen is reported when first observed, by the
// first Allow after the window (nothing runs at the window's end itself). A
// scope dropped to respect WithMaxScopes reports a change to Closed.
func WithOnStateChange(fn func(scope string, from, to State)) Option {
	return func(c *config) { c.onStateChange = fn }
}

// Set holds the breakers of every penalised scope. It is safe for concurrent
// use; the zero Set is not usable, call [New].
type Set struct {
	cfg config

	// live counts the entries, so that a Set with no penalty at all answers
	// Allow without a single map lookup.
	live atomic.Int64
	// scopes maps a scope to its *entry. Reads are lock-free; writes hold mu.
	scopes sync.Map

	mu     sync.Mutex
	byEnds endHeap // every live entry, the window that ends first on top
}

// entry is one penalty of one scope: its window's end and the gobreaker
// breaker that runs the half-open probe afterwards. An entry is never
// modified: a new penalty or a stuck probe replaces it, so outcomes of
// requests let through by an older entry cannot affect the newer one.
type entry struct {
	scope string
	until time.Time
	code  string // the provider's error code that opened it
	cb    *gobreaker.TwoStepCircuitBreaker[struct{}]

	probeSince atomic.Int64 // unix nanos when the current probe started; 0: none
	// answered is closed once the current probe's outcome is reported (nil:
	// no probe out), so that requests meeting it can wait for its answer.
	answered atomic.Pointer[chan struct{}]
	halfOpen atomic.Bool // the Open→HalfOpen change was reported
	index    int         // in Set.byEnds; -1 once removed (guarded by Set.mu)
}

// errTrip opens a fresh gobreaker breaker; errIgnored releases a probe without
// counting it either way.
var (
	errTrip    = errors.New("circuit: penalised")
	errIgnored = errors.New("circuit: ignored")
)

// New returns an empty Set.
func New(opts ...Option) (*Set, error) {
	cfg := config{maxScopes: DefaultMaxScopes, probeTimeout: DefaultProbeTimeout, now: time.Now}
	for _, o := range opts {
		o(&cfg)
	}
	switch {
	case cfg.maxScopes < 1:
		return nil, fmt.Errorf("circuit: WithMaxScopes must be at least 1, got %d", cfg.maxScopes)
	case cfg.probeTimeout <= 0:
		return nil, fmt.Errorf("circuit: WithProbeTimeout must be positive, got %v", cfg.probeTimeout)
	case cfg.now == nil:
		return nil, errors.New("circuit: WithClock must not be nil")
	}
	return &Set{cfg: cfg}, nil
}

func newEntry(scope string, until time.Time, code string) *entry {
	cb := gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name: scope,
		// One probe at a time, and one success closes the breaker.
		MaxRequests: 1,
		// The Set measures the window on its own clock and only consults the
		// breaker once the window is over, so gobreaker's open state only has
		// to last until the next call. Zero would mean gobreaker's 60 s default.
		Timeout:      time.Nanosecond,
		ReadyToTrip:  func(c gobreaker.Counts) bool { return c.ConsecutiveFailures > 0 },
		IsExcluded:   func(err error) bool { return err == errIgnored },
		IsSuccessful: func(err error) bool { return err == nil },
	})
	// A fresh breaker is closed; its single failure trips it.
	if done, err := cb.Allow(); err == nil {
		done(errTrip)
	}
	return &entry{scope: scope, until: until, code: code, cb: cb, index: -1}
}

func (s *Set) load(scope string) *entry {
	if v, ok := s.scopes.Load(scope); ok {
		return v.(*entry)
	}
	return nil
}

// noop is the done of a request that met no breaker: a package-level value,
// so the common path allocates nothing.
var noop = func(Outcome) {}

// Allow asks to send one request that belongs to every scope in scopes.
//
// If any scope is open it returns an [*OpenError] (errors.Is(err, ErrOpen))
// naming the one whose window ends last. Otherwise the request may go and
// done must be called exactly once with its outcome; later calls are ignored.
// A request that reaches a scope whose window has ended is that scope's
// probe: until its done, other requests of the scope are refused with
// Probing set.
//
// A request none of whose scopes was ever penalised costs one map lookup per
// scope and allocates nothing.
func (s *Set) Allow(scopes []string) (done func(Outcome), err error) {
	if s.live.Load() == 0 {
		return noop, nil
	}
	for _, sc := range scopes {
		if s.load(sc) != nil {
			return s.allowSlow(scopes)
		}
	}
	return noop, nil
}

// allowSlow is Allow for a request that met at least one breaker: it is
// refused if a window is still running, and otherwise becomes the probe of
// every scope whose window has ended.
func (s *Set) allowSlow(scopes []string) (func(Outcome), error) {
	now := s.cfg.now()
	open, probes := s.openAndEnded(scopes, now)
	if open != nil {
		return nil, &OpenError{Scope: open.scope, Until: open.until, Code: open.code}
	}
	if len(probes) == 0 {
		return noop, nil
	}
	dones, err := s.takeProbes(probes, now)
	if err != nil {
		return nil, err
	}
	return s.probeDone(probes, dones), nil
}

// openAndEnded splits the breakers met by scopes into the open one whose window
// ends last (nil if none is open) and those whose window has ended, each
// once.
func (s *Set) openAndEnded(scopes []string, now time.Time) (open *entry, ended []*entry) {
	ended = make([]*entry, 0, len(scopes))
	for _, sc := range scopes {
		e := s.load(sc)
		switch {
		case e == nil:
		case now.Before(e.until):
			if open == nil || e.until.After(open.until) {
				open = e
			}
		case !contains(ended, e):
			ended = append(ended, e)
		}
	}
	return open, ended
}

// takeProbes makes the request the probe of each entry in probes, replacing
// an entry whose probe went unanswered past the probe timeout. If one
// refuses (another probe is out, or a new penalty came meanwhile), it gives
// back the probes taken so far and returns the refusal. probes is updated in
// place with the entries actually probed.
func (s *Set) takeProbes(probes []*entry, now time.Time) ([]func(error), error) {
	dones := make([]func(error), len(probes))
	release := func(n int) {
		for i := range n {
			probes[i].probeSince.Store(0)
			probes[i].answer()
			dones[i](errIgnored)
		}
	}
	for i, e := range probes {
		if e.halfOpen.CompareAndSwap(false, true) {
			s.notify(e.scope, Open, HalfOpen)
		}
		d, err := e.cb.Allow()
		if errors.Is(err, gobreaker.ErrTooManyRequests) && s.probeStuck(e, now) {
			e = s.replace(e)
			probes[i] = e
			if now.Before(e.until) { // a new penalty came meanwhile
				release(i)
				return nil, &OpenError{Scope: e.scope, Until: e.until, Code: e.code}
			}
			d, err = e.cb.Allow()
		}
		if err != nil {
			release(i)
			return nil, &OpenError{Scope: e.scope, Until: e.until, Code: e.code, Probing: errors.Is(err, gobreaker.ErrTooManyRequests)}
		}
		e.probeSince.Store(now.UnixNano())
		ch := make(chan struct{})
		if old := e.answered.Swap(&ch); old != nil {
			close(*old) // a stuck probe's: its waiters look again
		}
		dones[i] = d
	}
	return dones, nil
}

// probeDone is the done of a probing request: its first call reports the
// outcome to each probed breaker, and a success removes the scopes whose
// breaker closed.
func (s *Set) probeDone(probes []*entry, dones []func(error)) func(Outcome) {
	var used atomic.Bool
	return func(o Outcome) {
		if !used.CompareAndSwap(false, true) {
			return
		}
		for i, e := range probes {
			e.probeSince.Store(0)
			// After the outcome: a waiter woken looks at the breaker as
			// the outcome left it.
			defer e.answer()
			if o != Success {
				dones[i](errIgnored)
				continue
			}
			dones[i](nil)
			if e.cb.State() == gobreaker.StateClosed {
				s.remove(e, HalfOpen)
			}
		}
	}
}

// answer wakes the requests waiting for e's probe.
func (e *entry) answer() {
	if ch := e.answered.Swap(nil); ch != nil {
		close(*ch)
	}
}

// Probing returns, when a probe is in flight on one of scopes, the refusal
// Allow would give (Probing set) and a channel closed once that probe is
// answered (or its breaker replaced or lifted); nil, nil when none is. A
// request may wait on it, within its own budget, and ask again: the scope
// is then closed, open for a new penalty, or free for it to probe.
func (s *Set) Probing(scopes []string) (*OpenError, <-chan struct{}) {
	if s.live.Load() == 0 {
		return nil, nil
	}
	for _, sc := range scopes {
		if e := s.load(sc); e != nil {
			if ch := e.answered.Load(); ch != nil {
				return &OpenError{Scope: e.scope, Until: e.until, Code: e.code, Probing: true}, *ch
			}
		}
	}
	return nil, nil
}

func contains(es []*entry, e *entry) bool {
	for _, x := range es {
		if x == e {
			return true
		}
	}
	return false
}

// probeStuck reports whether e's probe has gone unanswered for longer than
// the probe timeout.
func (s *Set) probeStuck(e *entry, now time.Time) bool {
	since := e.probeSince.Load()
	return since != 0 && now.Sub(time.Unix(0, since)) >= s.cfg.probeTimeout
}

// replace swaps e for a fresh entry with the same window, abandoning a probe
// whose outcome never came, and returns the entry now in place.
func (s *Set) replace(e *entry) *entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.load(e.scope)
	if cur != e {
		if cur == nil {
			// Removed meanwhile: the probe succeeded after all. A fresh
			// entry whose window is over lets exactly one probe through,
			// which is what the caller is about to do.
			return newEntry(e.scope, e.until, e.code)
		}
		return cur
	}
	fresh := newEntry(e.scope, e.until, e.code)
	fresh.halfOpen.Store(true)
	fresh.index = e.index
	s.byEnds[e.index] = fresh
	e.index = -1
	s.scopes.Store(e.scope, fresh)
	e.answer() // its waiters look again, at the fresh entry
	return fresh
}

// Penalize opens scope's breaker until until, as a quota verdict with the
// provider's code demands (the code comes back in OpenError). A
// later end extends an open window; an earlier one never shortens it. An end
// that has passed already changes nothing. A half-open scope opens again: this
// is how a probe that meets another quota verdict reopens its scope for the
// new window.
func (s *Set) Penalize(scope string, until time.Time, code string) {
	now := s.cfg.now()
	if !now.Before(until) {
		return
	}
	var events [2]event
	n := 0
	s.mu.Lock()
	old := s.load(scope)
	if old != nil && !until.After(old.until) {
		s.mu.Unlock()
		return
	}
	e := newEntry(scope, until, code)
	if old != nil {
		if from := s.stateOf(old, now); from != Open {
			events[n] = event{scope, from, Open}
			n++
		}
		e.index = old.index
		s.byEnds[old.index] = e
		old.index = -1
		heap.Fix(&s.byEnds, e.index)
		defer old.answer() // requests waiting for its probe meet the new penalty
	} else {
		if len(s.byEnds) >= s.cfg.maxScopes {
			victim := heap.Pop(&s.byEnds).(*entry)
			s.scopes.Delete(victim.scope)
			s.live.Add(-1)
			defer victim.answer()
			if from := s.stateOf(victim, now); from != Closed {
				events[n] = event{victim.scope, from, Closed}
				n++
			}
		}
		heap.Push(&s.byEnds, e)
		s.live.Add(1)
		events[n] = event{scope, Closed, Open}
		n++
	}
	s.scopes.Store(scope, e)
	s.mu.Unlock()
	for _, ev := range events[:n] {
		s.notify(ev.scope, ev.from, ev.to)
	}
}

type event struct {
	scope    string
	from, to State
}

// remove drops e after its probe succeeded, unless a newer penalty replaced it.
func (s *Set) remove(e *entry, from State) {
	s.mu.Lock()
	if e.index < 0 || s.load(e.scope) != e {
		s.mu.Unlock()
		return
	}
	heap.Remove(&s.byEnds, e.index)
	s.scopes.Delete(e.scope)
	s.live.Add(-1)
	s.mu.Unlock()
	s.notify(e.scope, from, Closed)
}

func (s *Set) notify(scope string, from, to State) {
	if s.cfg.onStateChange != nil {
		s.cfg.onStateChange(scope, from, to)
	}
}

func (s *Set) stateOf(e *entry, now time.Time) State {
	switch {
	case now.Before(e.until):
		return Open
	case e.cb.State() == gobreaker.StateClosed:
		return Closed
	}
	return HalfOpen
}

// State returns scope's state now.
func (s *Set) State(scope string) State {
	e := s.load(scope)
	if e == nil {
		return Closed
	}
	return s.stateOf(e, s.cfg.now())
}

// Penalty returns the end and the provider's code of scope's penalty while
// the scope is open; ok is false otherwise.
func (s *Set) Penalty(scope string) (until time.Time, code string, ok bool) {
	e := s.load(scope)
	if e == nil || s.stateOf(e, s.cfg.now()) != Open {
		return time.Time{}, "", false
	}
	return e.until, e.code, true
}

// Open returns how many scopes are open now, e.g. for a gauge. It visits
// every live breaker; call it at scrape time, not per request.
func (s *Set) Open() int {
	now := s.cfg.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, e := range s.byEnds {
		if now.Before(e.until) {
			n++
		}
	}
	return n
}

// Len returns how many scopes hold a breaker (open or half-open); it never
// exceeds WithMaxScopes.
func (s *Set) Len() int { return int(s.live.Load()) }

// endHeap orders entries by the end of their window, earliest on top: the
// first to drop when the Set is full, since expired windows sort before any
// open one.
type endHeap []*entry

func (h endHeap) Len() int           { return len(h) }
func (h endHeap) Less(i, j int) bool { return h[i].until.Before(h[j].until) }
func (h endHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *endHeap) Push(x any) {
	e := x.(*entry)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *endHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.index = -1
	return e
}
