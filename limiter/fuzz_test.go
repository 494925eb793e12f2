package limiter_test

import (
	"context"
	"testing"
	"time"

	"github.com/quotaware/throttle/limiter"
)

// Any numbers either build a rule that keeps its contract or fail with a
// RuleError; nothing panics.
func FuzzNewRule(f *testing.F) {
	f.Add("k", 20, int64(time.Second), 1)
	f.Add("k", 7, int64(time.Second), 2)
	f.Add("", 0, int64(0), 0)
	f.Add("k", 1, int64(1), 1)
	f.Add("k", 1_000_000, int64(time.Microsecond), 1_000_000)
	f.Fuzz(func(t *testing.T, key string, limit int, period int64, burst int) {
		r, err := limiter.NewRule(key, limit, time.Duration(period), limiter.WithBurst(burst))
		if err != nil {
			if _, ok := err.(*limiter.RuleError); !ok {
				t.Fatalf("error %T is not a RuleError", err)
			}
			return
		}
		if r.Limit() < 1 || r.Burst() < 1 || r.Burst() > r.Limit() || len(r.Key()) > limiter.MaxKeyLen || r.Key() == "" {
			t.Fatalf("invalid rule accepted: %v", r)
		}
		// The emission interval is rounded up: Limit-Burst+1 intervals
		// never fit in less than a Period.
		if slots := time.Duration(r.Limit() - r.Burst() + 1); r.Interval()*slots < r.Period() {
			t.Fatalf("%v: interval %v × %d < period %v", r, r.Interval(), slots, r.Period())
		}
		// The rule is usable.
		m := limiter.NewMemory()
		if _, err := m.Reserve(context.Background(), limiter.Request{Group: "g", Rules: []limiter.Rule{r}}); err != nil {
			t.Fatalf("reserve with a valid rule: %v", err)
		}
	})
}
