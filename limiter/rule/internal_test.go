package rule

import (
	"testing"

	"github.com/quotaware/throttle/limiter/internal/rulecore"
)

// The public constants and the parsed form's must agree: limiter enforces
// rulecore's, users write these.
func TestConstantsMatchTheParsedForm(t *testing.T) {
	if MaxKeyLen != rulecore.MaxKeyLen {
		t.Errorf("MaxKeyLen %d, rulecore %d", MaxKeyLen, rulecore.MaxKeyLen)
	}
	for _, u := range []struct {
		pub  Unit
		core rulecore.Unit
	}{{Minute, rulecore.Minute}, {Hour, rulecore.Hour}, {Day, rulecore.Day}, {Month, rulecore.Month}} {
		if rulecore.Unit(u.pub) != u.core || u.pub.String() != u.core.String() {
			t.Errorf("unit %v is %v in rulecore", u.pub, u.core)
		}
	}
}
