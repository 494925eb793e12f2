package rule_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/quotaware/throttle/limiter/rule"
)

// The four kinds of rule, as a preset for a provider would declare them,
// and an invalid one refused where it is built, naming the field.
func Example() {
	shanghai := time.FixedZone("CST", 8*3600)
	rules := []rule.Rule{
		rule.Must(rule.New("app:qps", 20, time.Second)),
		rule.Must(rule.NewWindow("robot:minute", 20, time.Minute, rule.WithMaxBookAhead(50*time.Millisecond))),
		rule.Must(rule.NewCalendar("app:month", 10000, rule.Month, shanghai, rule.WithGrace(time.Second))),
		rule.Must(rule.NewConcurrency("app:inflight", 20, 30*time.Second)),
	}
	for _, r := range rules {
		fmt.Println(r)
	}

	_, err := rule.New("app:qps", 20, time.Second, rule.WithBurst(21))
	var re *rule.Error
	if errors.As(err, &re) {
		fmt.Println("refused:", re.Field)
	}
	// Output:
	// app:qps: 20 per 1s
	// robot:minute: 20 in any 1m0s
	// app:month: 10000 per month (CST)
	// app:inflight: 20 in flight
	// refused: Burst
}
