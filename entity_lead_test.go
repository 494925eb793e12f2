package throttle

import (
	"context"
	"testing"
	"time"

	"github.com/quotaware/throttle/limiter/rule"
)

// A held-back request asks again earlier the more of its budget it has
// used, never earlier than the rule's cap allows, and a rule without a cap
// gets no lead: the oldest of an entity's waiters reaches the limiter
// first.
func TestLeadGrowsWithAgeWithinTheCap(t *testing.T) {
	const ahead = 50 * time.Millisecond
	capped := rule.Must(rule.New("k", 5, time.Second, rule.WithMaxBookAhead(ahead)))
	never := rule.Must(rule.New("k", 5, time.Second, rule.WithMaxBookAhead(0)))
	tr := &Transport{maxWait: 2 * time.Second}
	now := time.Now()
	young := &call{t: tr, start: now.Add(-100 * time.Millisecond)}
	old := &call{t: tr, start: now.Add(-1500 * time.Millisecond)}
	ctx := context.Background()
	ly, lo := young.lead(ctx, capped), old.lead(ctx, capped)
	if ly <= 0 || lo <= ly || lo > ahead {
		t.Errorf("leads %v (waited 0.1s) and %v (waited 1.5s): want 0 < young < old <= %v", ly, lo, ahead)
	}
	if l := old.lead(ctx, never); l != 0 {
		t.Errorf("lead %v under a rule that never books ahead, want 0", l)
	}
}
