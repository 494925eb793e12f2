package limiter

import (
	"github.com/quotaware/throttle/limiter/internal/rulecore"
	"github.com/quotaware/throttle/limiter/rule"
)

// core reaches a rule's parsed form, which package rule keeps unexported
// (see package rulecore). The assertion runs once, at init.
var core = rulecore.Of.(func(*rule.Rule) *rulecore.Rule)

// scale cuts a rule to a share of its limit (at least 1), keeping its period
// and its cap on booking ahead, so n replicas with share 1/n admit no more
// than the whole rule.
func scale(orig rule.Rule, share float64) rule.Rule {
	r := core(&orig)
	limit := max(1, int(float64(r.Limit)*share))
	var s rule.Rule
	var err error
	switch r.Kind {
	case rulecore.Concurrency:
		s, err = rule.NewConcurrency(r.Key, limit, r.Period)
	case rulecore.Calendar:
		s, err = rule.NewCalendar(r.Key, limit, rule.Unit(r.Unit), r.Loc, rule.WithGrace(r.Grace))
	case rulecore.Window:
		s, err = rule.NewWindow(r.Key, limit, r.Period)
	default:
		burst := min(limit, max(1, int(float64(r.Burst)*share)))
		s, err = rule.New(r.Key, limit, r.Period, rule.WithBurst(burst))
	}
	if err != nil {
		return orig
	}
	c := core(&s)
	c.AheadCapped, c.MaxAheadUs, c.ArgAhead = r.AheadCapped, r.MaxAheadUs, r.ArgAhead
	return s
}
