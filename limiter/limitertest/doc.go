// Package limitertest is the conformance suite every limiter.Limiter must
// pass: the contract of docs/design.md (sections 4 and 5, "The limiter's
// state and scripts" and "Reservations") proven from the scheduled send
// times the limiter returns, never from wall-clock assertions.
//
// An implementation runs it from its own tests:
//
//	func TestConformance(t *testing.T) {
//		limitertest.Run(t, func(t *testing.T, n int) []limiter.Limiter { ... })
//	}
//
// The factory returns n limiters that share state, as n replicas would.
package limitertest
