package limiter

import (
	"context"
	"testing"
	"time"
)

// Two penalties of one end (WeChat's 45009s all end at midnight): the
// later call's is held, so that dropping the stale one as stale cannot
// take the fresh one with it.
func TestATieHoldsTheLaterCall(t *testing.T) {
	m := NewMemory()
	ctx := context.Background()
	until := time.Now().Add(time.Hour)
	stale := Penalty{Scope: "api:a", Until: until, Code: "45009", Sent: time.Now().Add(-time.Minute)}
	fresh := stale
	fresh.Sent = time.Now()
	for _, p := range []Penalty{stale, fresh, stale} {
		if err := m.Penalize(ctx, "g", p); err != nil {
			t.Fatal(err)
		}
	}
	m.forgetPenalty("g", stale)
	if p, ok := m.penalties[stateKey{"g", "api:a"}]; !ok || !p.Sent.Equal(fresh.Sent) {
		t.Fatalf("after dropping the stale penalty: %+v, %v; want the fresh one held", p, ok)
	}
	m.forgetPenalty("g", fresh)
	if _, ok := m.penalties[stateKey{"g", "api:a"}]; ok {
		t.Fatal("forgetPenalty of the penalty held left it")
	}
}
