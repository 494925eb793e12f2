package rule_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/limitertest"
	"github.com/quotaware/throttle/limiter/rule"
)

func TestRuleValidation(t *testing.T) {
	shanghai, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("k", rule.MaxKeyLen+1)
	cases := []struct {
		name  string
		build func() (rule.Rule, error)
		field string
	}{
		{"limit 0", func() (rule.Rule, error) { return rule.New("k", 0, time.Second) }, "Limit"},
		{"negative limit", func() (rule.Rule, error) { return rule.New("k", -3, time.Second) }, "Limit"},
		{"period 0", func() (rule.Rule, error) { return rule.New("k", 1, 0) }, "Period"},
		{"negative period", func() (rule.Rule, error) { return rule.New("k", 1, -time.Second) }, "Period"},
		{"sub-µs period", func() (rule.Rule, error) { return rule.New("k", 1, time.Nanosecond) }, "Period"},
		{"burst 0", func() (rule.Rule, error) { return rule.New("k", 5, time.Second, rule.WithBurst(0)) }, "Burst"},
		{"burst over limit", func() (rule.Rule, error) { return rule.New("k", 5, time.Second, rule.WithBurst(6)) }, "Burst"},
		{"empty key", func() (rule.Rule, error) { return rule.New("", 5, time.Second) }, "Key"},
		{"oversized key", func() (rule.Rule, error) { return rule.New(long, 5, time.Second) }, "Key"},
		{"nil location", func() (rule.Rule, error) { return rule.NewCalendar("k", 5, rule.Day, nil) }, "Location"},
		{"bad unit", func() (rule.Rule, error) { return rule.NewCalendar("k", 5, rule.Unit(9), shanghai) }, "Unit"},
		{"calendar limit 0", func() (rule.Rule, error) { return rule.NewCalendar("k", 0, rule.Month, shanghai) }, "Limit"},
		{"negative grace", func() (rule.Rule, error) {
			return rule.NewCalendar("k", 5, rule.Month, shanghai, rule.WithGrace(-time.Second))
		}, "Grace"},
		{"negative book-ahead cap", func() (rule.Rule, error) {
			return rule.New("k", 5, time.Second, rule.WithMaxBookAhead(-time.Millisecond))
		}, "MaxBookAhead"},
		{"book-ahead cap on a calendar rule", func() (rule.Rule, error) {
			return rule.NewCalendar("k", 5, rule.Day, shanghai, rule.WithMaxBookAhead(0))
		}, "MaxBookAhead"},
		// Values whose microseconds overflow: the rule stopped limiting
		// (a negative interval) or refused everything.
		{"period of 290 years", func() (rule.Rule, error) { return rule.New("k", 1, time.Duration(math.MaxInt64)) }, "Period"},
		{"window of 290 years", func() (rule.Rule, error) { return rule.NewWindow("k", 1, time.Duration(math.MaxInt64)) }, "Period"},
		{"lease of 290 years", func() (rule.Rule, error) { return rule.NewConcurrency("k", 1, time.Duration(math.MaxInt64)) }, "Lease"},
		{"burst tolerance past 3,000 years", func() (rule.Rule, error) {
			return rule.New("k", 5_000_000, 30*24*time.Hour, rule.WithBurst(5_000_000))
		}, "Burst"},
		// Options of another kind of rule: refused, never ignored.
		{"burst on a calendar rule", func() (rule.Rule, error) {
			return rule.NewCalendar("k", 5, rule.Day, shanghai, rule.WithBurst(1000))
		}, "Burst"},
		{"burst on a window rule", func() (rule.Rule, error) { return rule.NewWindow("k", 5, time.Minute, rule.WithBurst(2)) }, "Burst"},
		{"grace on a paced rule", func() (rule.Rule, error) { return rule.New("k", 5, time.Second, rule.WithGrace(time.Second)) }, "Grace"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.build()
			var re *rule.Error
			if !errors.As(err, &re) || re.Field != tc.field {
				t.Fatalf("err = %v, want a rule.Error naming %s", err, tc.field)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("message %q does not name %s", err, tc.field)
			}
		})
	}
	r := rule.Must(rule.New("k", 5, time.Second))
	if _, err := r.WithKey(""); err == nil {
		t.Error("WithKey(\"\") accepted an empty key")
	}
}

// The emission interval rounds up: 7/s with burst 2 is T = 1s/6, which in
// whole microseconds must be 166667, not 166666 (that would let 8 through in
// one second).
// Limits near MaxInt are rules like any other (an interval of 1 µs),
// not a division by zero in the constructor.
func TestHugeLimitIsNoPanic(t *testing.T) {
	for _, burst := range []int{1, 2, 1000} {
		r, err := rule.New("k", math.MaxInt, time.Second, rule.WithBurst(burst))
		if err != nil {
			t.Fatalf("burst %d: %v", burst, err)
		}
		if got := rule.Interval(r); got != time.Microsecond {
			t.Errorf("burst %d: Interval = %v, want 1µs", burst, got)
		}
	}
}

func TestIntervalRoundsUp(t *testing.T) {
	r := rule.Must(rule.New("k", 7, time.Second, rule.WithBurst(2)))
	if got, want := rule.Interval(r), 166667*time.Microsecond; got != want {
		t.Fatalf("Interval = %v, want %v", got, want)
	}
	m := limiter.NewMemory()
	req := limiter.Request{Group: "g", Rules: []rule.Rule{r}, MaxWait: 2 * time.Second}
	var sends []time.Time
	for i := 0; i < 12; i++ {
		res, err := m.Reserve(context.Background(), req)
		if err != nil || !res.OK() {
			t.Fatalf("reserve %d: %+v %v", i, res, err)
		}
		sends = append(sends, res.SendAt())
	}
	if most, _ := limitertest.MaxInWindow(sends, time.Second); most > 7 {
		t.Fatalf("%d sends in one second, want at most 7", most)
	}
}

func TestNewWindowValidation(t *testing.T) {
	cases := []struct {
		name   string
		limit  int
		period time.Duration
		field  string
	}{
		{"limit 0", 0, time.Minute, "Limit"},
		{"period 0", 5, 0, "Period"},
		{"negative period", 5, -time.Second, "Period"},
		{"sub-µs period", 5, time.Nanosecond, "Period"},
	}
	for _, tc := range cases {
		_, err := rule.NewWindow("k", tc.limit, tc.period)
		var re *rule.Error
		if !errors.As(err, &re) || re.Field != tc.field {
			t.Errorf("%s: err %v, want a rule.Error on %s", tc.name, err, tc.field)
		}
	}
	r := rule.Must(rule.NewWindow("robot", 20, time.Minute))
	if !rule.IsWindow(r) || rule.Burst(r) != 20 || rule.Interval(r) != 0 || r.String() != "robot: 20 in any 1m0s" {
		t.Errorf("rule %v: IsWindow %v Burst %d Interval %v", r, rule.IsWindow(r), rule.Burst(r), rule.Interval(r))
	}
	if rule.Resolution(r) != time.Microsecond {
		t.Errorf("20/min keeps every send time, resolution %v", rule.Resolution(r))
	}
	if big := rule.Must(rule.NewWindow("m", 1000, time.Minute)); rule.Resolution(big) != time.Minute/64 {
		t.Errorf("1000/min resolution %v, want a 64th of the minute", rule.Resolution(big))
	}
	k, _ := r.WithKey("other")
	if !rule.IsWindow(k) || rule.WindowPeriod(k) != rule.WindowPeriod(r) {
		t.Errorf("WithKey lost the window: %v", k)
	}
}

// Any numbers either build a rule that keeps its contract or fail with a
// rule.Error; nothing panics.
func FuzzNew(f *testing.F) {
	f.Add("k", 20, int64(time.Second), 1)
	f.Add("k", 7, int64(time.Second), 2)
	f.Add("", 0, int64(0), 0)
	f.Add("k", 1, int64(1), 1)
	f.Add("k", 1_000_000, int64(time.Microsecond), 1_000_000)
	f.Fuzz(func(t *testing.T, key string, limit int, period int64, burst int) {
		r, err := rule.New(key, limit, time.Duration(period), rule.WithBurst(burst))
		if err != nil {
			if _, ok := err.(*rule.Error); !ok {
				t.Fatalf("error %T is not a *rule.Error", err)
			}
			return
		}
		if r.Limit() < 1 || rule.Burst(r) < 1 || rule.Burst(r) > r.Limit() || len(r.Key()) > rule.MaxKeyLen || r.Key() == "" {
			t.Fatalf("invalid rule accepted: %v", r)
		}
		// The emission interval is rounded up: Limit-Burst+1 intervals
		// never fit in less than a Period.
		if slots := time.Duration(r.Limit() - rule.Burst(r) + 1); rule.Interval(r)*slots < r.Period() {
			t.Fatalf("%v: interval %v × %d < period %v", r, rule.Interval(r), slots, r.Period())
		}
		// The rule is usable.
		m := limiter.NewMemory()
		if _, err := m.Reserve(context.Background(), limiter.Request{Group: "g", Rules: []rule.Rule{r}}); err != nil {
			t.Fatalf("reserve with a valid rule: %v", err)
		}
	})
}
