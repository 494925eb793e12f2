package sdktest

import (
	"os"
	"sync"
	"time"

	"github.com/quotaware/throttle"
)

// EnvUnshared, set to any value, makes the fleet tests measure the fleet
// without shared tokens ("before"): their Transports are built with
// throttle.WithoutSharedTokens, the numbers are logged and nothing is
// asserted.
//
//	THROTTLE_FLEET_UNSHARED=1 go test -run Fleet -v ./...
const EnvUnshared = "THROTTLE_FLEET_UNSHARED"

// Unshared reports whether EnvUnshared is set.
func Unshared() bool { return os.Getenv(EnvUnshared) != "" }

// FleetOptions returns the options a fleet test adds to each replica's
// Transport: WithoutSharedTokens when Unshared, none otherwise.
func FleetOptions() []throttle.Option {
	if Unshared() {
		return []throttle.Option{throttle.WithoutSharedTokens()}
	}
	return nil
}

// Fleet paces a fleet of replicas, each restarting its SDK clients (a
// new client with an empty token cache) every Period for Rounds periods:
// production's 2 s for 20 s, time-scaled.
type Fleet struct {
	Replicas int
	Rounds   int
	Period   time.Duration
}

// Run calls restart(replica) for every replica at once, then again one
// Period after the last for Rounds rounds (pacing the scenario, not
// synchronising it); midway, mid runs once beside them (a revocation).
// It returns when every replica is done, with the time mid started.
func (f Fleet) Run(restart func(replica int), mid func()) (midAt time.Time) {
	start := time.Now()
	var wg sync.WaitGroup
	for r := range f.Replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := range f.Rounds {
				restart(r)
				time.Sleep(time.Until(start.Add(time.Duration(round+1) * f.Period)))
			}
		}()
	}
	time.Sleep(time.Duration(f.Rounds/2) * f.Period) // mid-run: pacing
	midAt = time.Now()
	if mid != nil {
		mid()
	}
	wg.Wait()
	return midAt
}
