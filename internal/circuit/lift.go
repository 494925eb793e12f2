package circuit

import (
	"container/heap"
	"time"
)

// Lift closes scope's breaker at once, whatever its state, as when an
// operator lifts a penalty that should not be there. It reports whether the
// scope held a breaker. A later Penalize opens it again as usual.
func (s *Set) Lift(scope string) bool {
	return s.lift(scope, func(*entry) bool { return true })
}

// LiftIf is Lift while scope's breaker holds the penalty until, code (as
// Penalize opened it): one opened since for a longer penalty stays.
func (s *Set) LiftIf(scope string, until time.Time, code string) bool {
	return s.lift(scope, func(e *entry) bool { return e.until.Equal(until) && e.code == code })
}

// lift closes scope's breaker when it holds one that match accepts (run
// under the lock).
func (s *Set) lift(scope string, match func(*entry) bool) bool {
	now := s.cfg.now()
	s.mu.Lock()
	e := s.load(scope)
	if e == nil || e.index < 0 || !match(e) {
		s.mu.Unlock()
		return false
	}
	from := s.stateOf(e, now)
	heap.Remove(&s.byEnds, e.index)
	s.scopes.Delete(scope)
	s.live.Add(-1)
	s.mu.Unlock()
	e.answer() // requests waiting for its probe look again
	if from != Closed {
		s.notify(scope, from, Closed)
	}
	return true
}

// Scopes returns the scopes holding a breaker (open or half-open) whose
// penalty match accepts, given the scope and the provider's code that
// opened it: for a provider's reset of its quotas, which ends a set of
// penalties no one has listed. match runs under the Set's lock and must
// not call the Set.
func (s *Set) Scopes(match func(scope, code string) bool) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, e := range s.byEnds {
		if match(e.scope, e.code) {
			out = append(out, e.scope)
		}
	}
	return out
}
