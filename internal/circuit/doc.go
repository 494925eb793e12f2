// Package circuit keeps one circuit breaker per penalty scope (an API of an
// app, an app, a company, an egress IP) and opens it for exactly the penalty
// window a provider's quota verdict names.
//
// A provider that answers "quota exceeded" keeps rejecting that scope until
// its penalty ends, and some count every rejected call against the next
// window. Calling on is wasted at best and prolongs the ban at worst, so a
// [Set] refuses requests of an open scope without any I/O until the window
// ends. It then lets a single probe through: a success closes the breaker and
// traffic resumes at the limiter's pace; another quota verdict opens it again
// for the new window (the caller reports it through [Set.Penalize]).
//
// Only quota verdicts open a breaker. Context cancellations, transport errors
// and other provider errors say nothing about the quota and never count as
// failures: a flaky network must not lock a healthy scope out.
//
// Each scope's probe state machine is a github.com/sony/gobreaker/v2
// TwoStepCircuitBreaker with MaxRequests 1. gobreaker fixes its open timeout
// when a breaker is created and reads time.Now itself, while penalty windows
// differ per verdict (one second, the next minute, the next month) and tests
// need a clock they control; so the Set keeps each window's end on its own
// clock, refuses until then without consulting gobreaker, and creates a fresh
// tripped gobreaker breaker for every penalty. A fresh breaker per penalty also
// means a late outcome of an earlier probe can never close a newer penalty.
//
// The shared, cross-replica penalty lives in the limiter (a Redis key per
// scope); this package is the local, allocation-free first check in front of
// it. gobreaker's DistributedCircuitBreaker is not used: it takes a Redis lock
// around every call.
//
// Scopes that were never penalised cost one map lookup per request and no
// allocation. The number of live breakers is bounded ([WithMaxScopes]): when
// full, the breaker whose window ends first (expired ones before any still
// open) is dropped, so a flood of distinct scopes cannot grow memory.
package circuit
