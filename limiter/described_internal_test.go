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
	ended, live := time.Now().Add(-time.Hour).UnixNano(), time.Now().Add(24*time.Hour).UnixNano()
	s.describedMu.Lock()
	for i := range maxDescribed {
		d := new(description)
		d.next.Store(ended)
		if i%2 == 0 {
			d.next.Store(live)
		}
		s.described[stateKey{"g", "day:" + strconv.Itoa(i)}] = d
	}
	s.describedMu.Unlock()
	held := func(key string) (bool, int) {
		s.describedMu.RLock()
		defer s.describedMu.RUnlock()
		_, ok := s.described[stateKey{"g", key}]
		return ok, len(s.described)
	}
	s.describe("g", rule.Must(rule.NewCalendar("day:new", 10, rule.Day, time.UTC)))
	if tracked, n := held("day:new"); !tracked || n != maxDescribed/2+1 {
		t.Fatalf("a new rule with %d held, half ended: tracked %v, %d held; want the live half and it", maxDescribed, tracked, n)
	}
	// Full of live rules: no sweep before the earliest of their ends (a
	// walk of every rule under the lock), and the newcomer waits.
	s.describedMu.Lock()
	for i := len(s.described); i < maxDescribed; i++ {
		d := new(description)
		d.next.Store(live)
		s.described[stateKey{"g", "live:" + strconv.Itoa(i)}] = d
	}
	s.describedSwept = s.describedSwept.Add(-2 * time.Minute)
	swept := s.describedSwept
	s.describedMu.Unlock()
	s.describe("g", rule.Must(rule.NewCalendar("day:later", 10, rule.Day, time.UTC)))
	s.describedMu.RLock()
	again := s.describedSwept != swept
	s.describedMu.RUnlock()
	if tracked, _ := held("day:later"); tracked || again {
		t.Fatalf("full of live rules: tracked %v, swept again %v; want neither before their ends", tracked, again)
	}
}
