package limiter

import (
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Listener is told what a Shared limiter learns that its users act on: a
// Transport opens its breakers on another replica's penalty, closes them on
// a lift, and counts the rest. Any field may be nil. The functions run on
// the limiter's goroutines, and some (Switch, and Event for what a reply
// showed) on the goroutine of the Reserve that found it: they must not
// block.
type Listener struct {
	// Switch is told once per switch when Redis goes away (down true, with
	// the error) and when the replica uses it again.
	Switch func(down bool, err error)
	// Penalty is told of every penalty another replica records, as soon as
	// it is announced and Redis confirms it, so that the scope can stop at
	// once instead of on its next reserve.
	Penalty func(group string, p Penalty)
	// Lift is told when a replica announces that a penalty was lifted and
	// its key is gone from Redis (or, without SUBSCRIBE rights, when a
	// known penalty key is found gone).
	Lift func(group, scope string)
	// Event is told of everything the limiter noticed that an operator
	// should know of, e.g. to count it; kind is one of
	//   "state_lost": Redis lost a group's state (FLUSHALL, eviction, a
	//     restart without persistence); new slots are held back past the
	//     ones this replica knew were booked;
	//   "corrupt_value": a key held a value that is not the limiter's
	//     state; it was read as absent and replaced;
	//   "announcement_rejected": a message on the announcement channel was
	//     malformed or not confirmed by Redis (spoofed), and ignored;
	//   "evictable": Redis's maxmemory-policy lets it evict the keys;
	//   "penalty_lost": a penalty taken during an outage could not be kept
	//     to be written later;
	//   "penalty_dropped": a penalty was not shared: it was over (on this
	//     replica's clock) before it could be written to Redis, or it
	//     answered a call sent before the provider reset that quota
	//     (ErrStalePenalty).
	// group is the request group concerned, or "". Each is also logged by
	// the limiter, at most once a minute per kind and group.
	Event func(kind, group string)
	// Stale is told of a penalty this replica took that was not recorded
	// because its call went out before the provider reset that quota
	// (ErrStalePenalty): as the answer is written, or once Redis answers
	// again for one kept through an outage. The replica's own stop for
	// that penalty should end.
	Stale func(group string, p Penalty)
}

// maxEarlyEvents bounds the events kept for the first listener.
const maxEarlyEvents = 32

// listeners is a copy-on-write list: telling them costs an atomic load.
// Events noticed before anyone listened (the eviction policy and the
// registry are checked as NewShared returns) are kept, up to
// maxEarlyEvents, and told to the first listener, so that a user who
// listens right after NewShared misses none.
type listeners struct {
	mu    sync.Mutex // serialises writers, guards early and ever
	list  atomic.Pointer[[]*Listener]
	early []event
	ever  bool // a listener was added
}

func (ls *listeners) event(e event) {
	if ls.list.Load() == nil {
		ls.mu.Lock()
		if !ls.ever {
			if len(ls.early) < maxEarlyEvents {
				ls.early = append(ls.early, e)
			}
			ls.mu.Unlock()
			return
		}
		ls.mu.Unlock()
	}
	ls.each(func(l *Listener) {
		if l.Event != nil {
			l.Event(string(e.Kind), e.Group)
		}
	})
}

func (ls *listeners) add(l *Listener) func() {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	var cur []*Listener
	if p := ls.list.Load(); p != nil {
		cur = *p
	}
	if !ls.ever {
		ls.ever = true
		if l.Event != nil {
			for _, e := range ls.early {
				l.Event(string(e.Kind), e.Group)
			}
		}
		ls.early = nil
	}
	next := append(append(make([]*Listener, 0, len(cur)+1), cur...), l)
	ls.list.Store(&next)
	var once sync.Once
	return func() { once.Do(func() { ls.remove(l) }) }
}

func (ls *listeners) remove(l *Listener) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	cur := *ls.list.Load()
	next := make([]*Listener, 0, len(cur))
	for _, x := range cur {
		if x != l {
			next = append(next, x)
		}
	}
	ls.list.Store(&next)
}

func (ls *listeners) each(f func(*Listener)) {
	if p := ls.list.Load(); p != nil {
		for _, l := range *p {
			f(l)
		}
	}
}

// Listen adds l to the listeners of the limiter's news and returns the
// function that removes it. A Transport given a Shared listens this way, so
// a Shared built by hand and given with throttle.WithLimiter is wired
// exactly like the one throttle.WithRedis builds. Safe for concurrent use.
//
// A listener added while Redis is away is told so at once (Switch with
// down true), as if it had been there when the limiter switched: a Shared
// that went down before it was given to a Transport otherwise showed no
// fallback for the whole outage. Listen waits for a switch in progress,
// whose Switch callbacks run under the switch's lock: a Switch callback
// must not call Listen (it would wait for itself).
func (s *Shared) Listen(l Listener) (stop func()) {
	// Under the switch's lock: a switch happens wholly before the
	// listener is added (told here) or after (told by the switch), never
	// both.
	f := s.failover
	f.switchMu.Lock()
	defer f.switchMu.Unlock()
	stop = s.listeners.add(&l)
	if l.Switch != nil && f.Down() {
		var err error
		if p := f.lastErr.Load(); p != nil {
			err = *p
		}
		l.Switch(true, err)
	}
	return stop
}

// Client is the Redis client the limiter was built on, for what shares
// its connection (the apps book of a Transport).
func (s *Shared) Client() redis.UniversalClient { return s.redis.client }

// Config is the limiter's configuration, its defaults filled in.
func (s *Shared) Config() SharedConfig { return s.cfg }
