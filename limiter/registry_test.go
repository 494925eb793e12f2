package limiter_test

import (
	"testing"
	"time"

	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/limitertest"
)

// Replicas find each other through the registry, and one that leaves drops
// out of the count of the others.
func TestRegistryCountsLiveReplicas(t *testing.T) {
	srv := redistest.Shared(t)
	prefix := limitertest.Group(t)
	var regs []*limiter.Registry
	for i := 0; i < 3; i++ {
		r := limiter.StartRegistry(srv.Client(t), prefix, 20*time.Millisecond)
		t.Cleanup(r.Close)
		regs = append(regs, r)
	}
	until := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 5s", what)
			}
			time.Sleep(10 * time.Millisecond) // polling beats of background goroutines
		}
	}
	until("all see 3", func() bool {
		return regs[0].Live() == 3 && regs[1].Live() == 3 && regs[2].Live() == 3
	})
	if s := regs[0].Share(); s != 1.0/3 {
		t.Fatalf("Share = %v, want 1/3", s)
	}
	regs[2].Close()
	until("the others see 2", func() bool { return regs[0].Live() == 2 && regs[1].Live() == 2 })
}
