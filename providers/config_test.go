package providers_test

import (
	"math"
	"strings"
	"testing"

	"github.com/quotaware/throttle/providers/wechat"
	"github.com/quotaware/throttle/providers/wecom"
)

// A TimeScale that is not a finite number of at least 1 is refused, naming
// the field: +Inf was accepted and shrank every minute and hour window to
// nothing, and NaN was refused with an error naming another field.
func TestTimeScaleMustBeFinite(t *testing.T) {
	for _, scale := range []float64{math.Inf(1), math.NaN(), 0.5, -1} {
		_, errWeChat := wechat.New(wechat.Config{TimeScale: scale})
		_, errWeCom := wecom.New(wecom.Config{TimeScale: scale})
		for name, err := range map[string]error{"wechat": errWeChat, "wecom": errWeCom} {
			if err == nil || !strings.Contains(err.Error(), "Config.TimeScale") {
				t.Errorf("%s TimeScale %v: %v, want an error naming Config.TimeScale", name, scale, err)
			}
		}
	}
}
