package sdktest

import (
	"encoding/json"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/providers"
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

// Transports builds n Transports, replicas of one service: each on its
// own limiter over the Redis client gives (key prefix prefix), sending to
// the emulator at emuURL with profile p, plus FleetOptions. They are
// closed when the test ends.
func Transports(t testing.TB, n int, client func() redis.UniversalClient, prefix, emuURL string, p providers.Profile) []*throttle.Transport {
	var out []*throttle.Transport
	for range n {
		tr := throttle.MustNew(append([]throttle.Option{
			throttle.WithLimiter(limiter.MustNewShared(client(), limiter.SharedConfig{Prefix: prefix})),
			throttle.WithBase(Redirect(emuURL)), throttle.WithProfiles(p),
		}, FleetOptions()...)...)
		t.Cleanup(func() { tr.Close() })
		out = append(out, tr)
	}
	return out
}

// Token sends req through rt and returns the JSON member of the answer
// that holds the token (access_token, tenant_access_token, ...): the
// token a replica would get, read to revoke it at the emulator.
func Token(t testing.TB, rt http.RoundTripper, req *http.Request, member string) string {
	t.Helper()
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if err != nil {
		t.Error(err)
		return ""
	}
	defer resp.Body.Close()
	var a map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&a)
	tok, _ := a[member].(string)
	return tok
}

// Split counts the records that match, before at and from at on.
func Split[R any](records []R, at time.Time, match func(R) (time.Time, bool)) (before, after int) {
	for _, r := range records {
		if when, ok := match(r); ok {
			if when.Before(at) {
				before++
			} else {
				after++
			}
		}
	}
	return before, after
}
