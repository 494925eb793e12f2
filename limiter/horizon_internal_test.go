package limiter

import (
	"strconv"
	"testing"
	"time"

	"github.com/quotaware/throttle/limiter/rule"
)

// A refusal's rule state far ahead (a key left by a rule that once allowed
// 1 an hour, or written by hand) counts toward the horizon only up to a
// minute past the answer: the horizon holds back every local slot of the
// replica at a switch, whatever the group. Before, one such value held them
// all back for as long (10^17 µs: until the process restarted).
func TestAFarAheadStateHoldsNothingBackLong(t *testing.T) {
	paced := rule.Must(rule.New("api", 20, time.Second))
	window := rule.Must(rule.NewWindow("hour", 100, time.Hour))
	now := time.Now()
	limit := now.Add(maxFleetAhead).UnixMicro()
	for _, tc := range []struct {
		name  string
		rules []rule.Rule
		fleet string
	}{
		{"paced", []rule.Rule{paced}, "900000000000000000"},
		{"window", []rule.Rule{window}, "900000000000000000"},
		{"an hour ahead", []rule.Rule{paced}, strconv.FormatInt(now.Add(time.Hour).UnixMicro(), 10)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := Request{Group: "g", Rules: tc.rules}
			res := (&Reservation{now: now, answered: now}).withFleet(tc.fleet)
			if at := fleetHorizon(&req, res); at > limit {
				t.Fatalf("horizon %.0fs past the answer, want at most %v", float64(at-now.UnixMicro())/1e6, maxFleetAhead)
			}
			f := &failover{}
			f.noteHorizon(req, *res)
			if at := f.lastSlot.Load(); at > limit {
				t.Fatalf("lastSlot %.0fs past the answer, want at most %v", float64(at-now.UnixMicro())/1e6, maxFleetAhead)
			}
			if hold := f.windowHold(&req); hold > limit+int64(time.Hour/time.Microsecond) {
				t.Fatalf("the window's hold %.0fs past the answer, want at most a minute and its period", float64(hold-now.UnixMicro())/1e6)
			}
		})
	}
	// A slot within the minute counts whole.
	req := Request{Group: "g", Rules: []rule.Rule{paced}}
	near := now.Add(30 * time.Second).UnixMicro()
	res := (&Reservation{now: now}).withFleet(strconv.FormatInt(near, 10))
	if at, want := fleetHorizon(&req, res), near-core(&paced).IntervalUs; at != want {
		t.Fatalf("horizon of a slot 30s ahead: %d, want %d", at, want)
	}
}
