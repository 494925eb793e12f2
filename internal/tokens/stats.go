package tokens

// Stats counts what a Sharer did.
type Stats struct {
	Fetched  int64 // exchanges sent to the provider whose answer was kept
	Shared   int64 // exchanges answered from Redis
	Waited   int64 // exchanges that waited for one in flight
	Healed   int64 // kept answers deleted because the provider refused their token
	Capped   int64 // heals refused by the credential's caps (WithHealLimits)
	Unshared int64 // exchanges sent as they came because Redis failed or the last answer could not be kept, or not kept because their lease lapsed
	Replaced int64 // requests sent with the fleet's current token in place of one the provider refused
}

// Results of the Sharer's work, as Stats counts them and an observer
// (WithObserver) hears them.
const (
	Fetched  = "fetched"  // an exchange sent to the provider, its answer kept
	Shared   = "shared"   // an exchange answered from Redis
	Waited   = "waited"   // an exchange that waited for one in flight (then shared or fetched too)
	Healed   = "healed"   // a kept answer deleted because the provider refused its token
	Capped   = "capped"   // a heal refused by the credential's caps (WithHealLimits)
	Unshared = "unshared" // an exchange sent as it came because Redis failed or the last answer could not be kept, or not kept because its lease lapsed
	Replaced = "replaced" // a request sent with the fleet's current token in place of one the provider refused
)

// Results are the results, in one list.
var Results = []string{Fetched, Shared, Waited, Healed, Capped, Unshared, Replaced}

// count counts one result of provider's exchanges.
func (s *Sharer) count(provider, result string) {
	switch result {
	case Fetched:
		s.fetched.Add(1)
	case Shared:
		s.shared.Add(1)
	case Waited:
		s.waited.Add(1)
	case Healed:
		s.healed.Add(1)
	case Capped:
		s.capped.Add(1)
	case Unshared:
		s.unshared.Add(1)
	case Replaced:
		s.replaced.Add(1)
	}
	if s.observe != nil {
		s.observe(provider, result)
	}
}

// Stats returns the counts so far.
func (s *Sharer) Stats() Stats {
	return Stats{Fetched: s.fetched.Load(), Shared: s.shared.Load(), Waited: s.waited.Load(),
		Healed: s.healed.Load(), Capped: s.capped.Load(), Unshared: s.unshared.Load(), Replaced: s.replaced.Load()}
}
