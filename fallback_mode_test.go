package throttle

import (
	"testing"

	"github.com/quotaware/throttle/limiter"
)

// Each FallbackMode maps to the limiter's OutageMode of the same meaning,
// by name, not by the order the two enums list their values in.
func TestFallbackModeMapsByName(t *testing.T) {
	for _, tc := range []struct {
		mode FallbackMode
		want limiter.OutageMode
	}{
		{FallbackLocal, limiter.OutageLocal},
		{FailClosed, limiter.OutageRefuse},
		{FailOpen, limiter.OutageAdmit},
	} {
		if got := tc.mode.outageMode(); got != tc.want {
			t.Errorf("%v maps to %v, want %v", tc.mode, got, tc.want)
		}
	}
	// The defaults are the limiter's.
	d, l := DefaultFallbackPolicy(), limiter.DefaultSharedConfig()
	if d.Timeout != l.Timeout || d.Probe != l.Probe || d.Recover != l.Recover {
		t.Errorf("DefaultFallbackPolicy %+v, limiter defaults %+v", d, l)
	}
}
