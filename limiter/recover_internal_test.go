package limiter

import (
	"testing"
	"time"
)

// A Recover above the doubling's cap is never cut to the cap: failing again
// soon after coming back took a Recover of 10 minutes to 1.
func TestRecoverNeverShrinks(t *testing.T) {
	f := newFailover(nil, failoverConfig{Recover: 10 * time.Minute})
	f.setDown(true, nil)
	f.setDown(false, nil)
	f.setDown(true, nil) // soon after coming back: the hysteresis grows
	if got := time.Duration(f.recover.Load()); got < 10*time.Minute {
		t.Fatalf("Recover after a quick failure is %v, want at least the 10m set", got)
	}
	g := newFailover(nil, failoverConfig{Recover: time.Second})
	g.setDown(true, nil)
	g.setDown(false, nil)
	g.setDown(true, nil)
	if got := time.Duration(g.recover.Load()); got != 2*time.Second {
		t.Fatalf("Recover after a quick failure is %v, want it doubled to 2s", got)
	}
}
