package inspect_test

import (
	"fmt"
	"time"

	"github.com/quotaware/throttle/limiter/inspect"
)

// A snapshot's rules and penalties in the words throttlectl prints.
func Example() {
	now := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	g := inspect.GroupState{
		Group: "dingtalk",
		Penalties: []inspect.PenaltyState{
			{Scope: "dingtalk:egress:default", Code: "90018", Until: now.Add(4 * time.Minute), Left: 4*time.Minute + 7*time.Second},
		},
		Rules: []inspect.RuleState{
			{Key: "dingtalk:api:app1:/v1.0/contact/users", Kind: "paced", Ahead: 150 * time.Millisecond},
			{Key: "dingtalk:month:corp1", Kind: "calendar", Used: 4200, Limit: 5000, Window: "month",
				ResetsAt: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)},
		},
	}
	st := inspect.State{Now: now, Groups: []inspect.GroupState{g}}
	fmt.Println("active:", st.Active())
	for _, p := range g.Penalties {
		fmt.Printf("%s: code %s, %s left\n", p.Scope, p.Code, inspect.FormatLeft(p.Left))
	}
	for _, r := range g.Rules {
		fmt.Printf("%s: %s\n", r.Key, r.Words(now))
	}
	// Output:
	// active: true
	// dingtalk:egress:default: code 90018, 4m07s left
	// dingtalk:api:app1:/v1.0/contact/users: slots booked 150ms ahead
	// dingtalk:month:corp1: 4200 / 5000 used (84%) this month, resets 2026-12-01 00:00 UTC (in 2d14h00m)
}
