package limiter

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quotaware/throttle/internal/redistest"
)

// A lift heard from the channel drops the copy of a penalty kept for
// outages, not one still waiting to be written to Redis: no operator saw
// that one in Redis to lift it, and a spoofed lift used to drop it for
// good (it never reached Redis, so no other replica learned of it).
func TestHeardLiftKeepsPenaltyWaitingToBeWritten(t *testing.T) {
	srv := redistest.Start(t)
	s, err := NewShared(srv.Client(t), SharedConfig{Prefix: "heardlift", Share: 1, Probe: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	srv.Stop()
	ctx := context.Background()
	// Redis away: the penalty is kept to be written (the first call
	// also says Redis failed).
	if err := s.Penalize(ctx, "g", Penalty{Scope: "app", Until: time.Now().Add(time.Hour), Code: "88"}); err != nil && !errors.Is(err, ErrUnavailable) {
		t.Fatal(err)
	}
	s.failover.penMu.Lock()
	_, kept := s.failover.penalties[penaltyID{"g", "app"}]
	s.failover.penMu.Unlock()
	if !kept {
		t.Fatal("the penalty was not kept to be written")
	}
	s.watcher.cfg.onLift("g", "app")
	s.failover.penMu.Lock()
	_, kept = s.failover.penalties[penaltyID{"g", "app"}]
	s.failover.penMu.Unlock()
	if !kept {
		t.Fatal("a lift heard from the channel dropped the penalty waiting to be written")
	}
}
