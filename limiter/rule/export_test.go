package rule

import (
	"time"

	"github.com/quotaware/throttle/limiter/internal/rulecore"
)

// Settings the tests check that package limiter reads through rulecore.
func Burst(r Rule) int                  { return int(r.c.Burst) }
func Interval(r Rule) time.Duration     { return time.Duration(r.c.IntervalUs) * time.Microsecond }
func Resolution(r Rule) time.Duration   { return time.Duration(r.c.ResolutionUs) * time.Microsecond }
func IsWindow(r Rule) bool              { return r.c.Kind == rulecore.Window }
func WindowPeriod(r Rule) time.Duration { return time.Duration(r.c.PeriodUs) * time.Microsecond }
