package limiter

import (
	"strconv"
	"testing"
	"time"

	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter/rule"
)

// Once the bound of rules to describe is reached, those whose window ended
// make room for new ones: an ISV in 100,000 orgs had the first 4,096 rules
// described, and every later org's limit missing from throttlectl, for as
// long as the process ran.
func TestDescribedRulesMakeRoom(t *testing.T) {
	srv := redistest.Shared(t)
	s, err := NewShared(srv.Client(t), SharedConfig{Prefix: "described", Share: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ended := time.Now().Add(-time.Hour).UnixNano()
	s.describedMu.Lock()
	for i := range maxDescribed {
		d := new(description)
		d.next.Store(ended)
		s.described[stateKey{"g", "day:" + strconv.Itoa(i)}] = d
	}
	s.describedMu.Unlock()
	r := rule.Must(rule.NewCalendar("day:new", 10, rule.Day, time.UTC))
	s.describe("g", r)
	s.describedMu.RLock()
	_, tracked := s.described[stateKey{"g", "day:new"}]
	n := len(s.described)
	s.describedMu.RUnlock()
	if !tracked || n != 1 {
		t.Fatalf("a new rule with %d ended ones held: tracked %v, %d held; want it alone", maxDescribed, tracked, n)
	}
}
