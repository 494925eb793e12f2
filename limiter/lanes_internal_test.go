package limiter

import (
	"strconv"
	"testing"
)

// Past maxLanes groups, idle lanes are dropped to make room, and a lane
// once dropped is never handed out again: a requester that found it just
// before it was dropped looks the group up again, so that one group never
// has two lanes making calls that book the same rules at once.
func TestLanesDropIdleLanesForGood(t *testing.T) {
	ls := &lanes{m: map[string]*lane{}}
	get := func(group string) *lane {
		ln := ls.get(&Request{Group: group})
		if ln == nil {
			t.Fatalf("no lane for %s", group)
		}
		if ln.dropped {
			t.Fatalf("a dropped lane handed out for %s", group)
		}
		ln.mu.Unlock()
		return ln
	}
	first := get("g0")
	busy := get("g1")
	busy.mu.Lock()
	busy.calls = 1
	busy.mu.Unlock()
	for i := 2; i < maxLanes; i++ {
		get("g" + strconv.Itoa(i))
	}
	// One more group: every idle lane goes, the busy one stays.
	get("new")
	if !first.dropped || busy.dropped {
		t.Fatalf("after eviction: idle lane dropped %v, busy lane dropped %v; want true, false", first.dropped, busy.dropped)
	}
	if again := get("g0"); again == first {
		t.Fatal("the dropped lane of g0 was handed out again")
	}
	if get("g1") != busy {
		t.Fatal("the busy lane of g1 was replaced")
	}
}
