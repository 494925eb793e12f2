package throttle

import (
	"strconv"
	"testing"

	"github.com/quotaware/throttle/providers"
)

// A request that noted the log before more entries than it keeps were
// added cannot tell whether one of those ended its penalty: it counts as
// ended (the reserve asks again). Before, an account-wide reset's lifts,
// one entry per scope, pushed the entry that mattered out, and a reply
// read before the lift opened the breaker for the penalty's whole length.
func TestResetLogCountsPushedOutEntriesAsEnded(t *testing.T) {
	var r resets
	seen := r.seen()
	r.lifted("api:other0")
	if r.ended("api:a", "45009", seen) {
		t.Fatal("a lift of another scope ended api:a")
	}
	r.lifted("api:a")
	for i := range maxResets {
		r.lifted("api:other" + strconv.Itoa(i+1))
	}
	if !r.ended("api:a", "45009", seen) {
		t.Fatal("a lift pushed out of the log did not count")
	}
	// Noted after the lift: nothing since ended it.
	if r.ended("api:a", "45009", r.seen()) {
		t.Fatal("a request noted after every entry counts as ended")
	}
	// One entry for all the scopes of a reset's lifts.
	var all resets
	seen = all.seen()
	all.liftedAll([]string{"api:c", "api:a", "api:b"})
	if all.n.Load() != 1 || !all.ended("api:b", "45011", seen) || all.ended("api:d", "45011", seen) {
		t.Fatalf("liftedAll: %d entries; ended b %v, d %v", all.n.Load(), all.ended("api:b", "45011", seen), all.ended("api:d", "45011", seen))
	}
	// The reset log itself keeps its code.
	var rs resets
	seen = rs.seen()
	rs.add(&providers.Cleared{Scopes: []string{"api:a"}, Code: "45009"})
	if !rs.ended("api:a", "45009", seen) || rs.ended("api:a", "45011", seen) {
		t.Fatal("a reset of 45009 ended the wrong codes")
	}
}
