package rulecore

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// MaxKeyLen bounds a rule key, a group and a penalty scope.
const MaxKeyLen = 256

// Of is a func(*rule.Rule) *Rule, set by package rule at init.
var Of any

// Kind is a rule's shape.
type Kind uint8

// The rule kinds.
const (
	Paced Kind = iota
	Calendar
	Concurrency
	Window
)

// Unit is a calendar window's length; package rule's Unit takes its values
// from these.
type Unit int

// Calendar units.
const (
	Minute Unit = iota + 1
	Hour
	Day
	Month
)

func (u Unit) String() string {
	switch u {
	case Minute:
		return "minute"
	case Hour:
		return "hour"
	case Day:
		return "day"
	case Month:
		return "month"
	}
	return fmt.Sprintf("Unit(%d)", int(u))
}

const (
	// WindowExactLimit is the largest window-rule limit whose log keeps
	// every send time: its live sends (a Period back and a MaxWait ahead)
	// fit in the log's 128 groups when MaxWait is at most a Period.
	WindowExactLimit = 64
	// WindowBuckets is how many resolution buckets a Period holds when the
	// limit is larger.
	WindowBuckets = 64
)

// Rule is a rule as built: its settings, then values derived once for the
// hot path.
type Rule struct {
	Kind   Kind
	Key    string
	Limit  int64
	Period time.Duration // a concurrency rule's lease
	Burst  int64

	Unit  Unit // calendar rules only
	Loc   *time.Location
	Grace time.Duration

	// WithMaxBookAhead: whether it was given, and the cap in µs (negative
	// until Validate rejects it).
	AheadCapped bool
	MaxAheadUs  int64

	// Derived by Derive, in microseconds.
	IntervalUs   int64 // paced: GCRA emission interval T, rounded up
	ToleranceUs  int64 // paced: (Burst-1) * T
	LeaseUs      int64 // concurrency
	PeriodUs     int64 // window
	ResolutionUs int64 // window: sends this close share a group of the log

	// Boxed once: the Redis limiter passes them as script arguments.
	// Paced: T, tolerance; concurrency: lease; window: period, resolution.
	ArgT, ArgTol any
	ArgAhead     any
}

// MaxPeriod bounds a rule's period and a lease: ten years, far past any
// provider's window, and far from overflowing the microseconds the
// limiters count in.
const MaxPeriod = 10 * 365 * 24 * time.Hour

// maxToleranceUs bounds a paced rule's burst tolerance (µs), about 3,170
// years: a full burst of a long period (150,000 an hour at once) stays well
// within it, and a booked time plus it stays below the 10^18 µs the Redis
// script reads as a time.
const maxToleranceUs = int64(1e17)

// Validate names the field at fault and why, or returns "" when r is valid.
func (r *Rule) Validate() (field, reason string) {
	if err := CheckKey(r.Key); err != nil {
		return "Key", err.Error()
	}
	if r.Limit < 1 {
		return "Limit", fmt.Sprintf("must be at least 1, got %d", r.Limit)
	}
	if r.AheadCapped {
		if r.Kind != Paced && r.Kind != Window {
			return "MaxBookAhead", "applies to paced and window rules only"
		}
		if r.MaxAheadUs < 0 {
			return "MaxBookAhead", "must not be negative"
		}
	}
	if r.Kind != Calendar && r.Grace != 0 {
		return "Grace", "applies to calendar rules only"
	}
	switch r.Kind {
	case Concurrency:
		if r.Period < time.Millisecond || r.Period > MaxPeriod {
			return "Lease", fmt.Sprintf("must be within [1ms, %v], got %v", MaxPeriod, r.Period)
		}
	case Paced, Window:
		if r.Period < time.Microsecond || r.Period > MaxPeriod {
			return "Period", fmt.Sprintf("must be within [1µs, %v], got %v", MaxPeriod, r.Period)
		}
		if r.Kind == Window && r.Burst != r.Limit {
			// A window admits its whole limit at once: no burst to set.
			return "Burst", "applies to paced rules only"
		}
		if r.Burst < 1 || r.Burst > r.Limit {
			return "Burst", fmt.Sprintf("must be within 1..Limit (%d), got %d", r.Limit, r.Burst)
		}
		// The burst's tolerance, (Burst-1) intervals, stays within
		// maxToleranceUs: beyond it the microseconds overflow.
		slots := r.Limit - r.Burst + 1
		interval := ceilDiv(ceilDiv(int64(r.Period), int64(time.Microsecond)), slots)
		if r.Burst > 1 && r.Burst-1 > maxToleranceUs/interval {
			return "Burst", fmt.Sprintf("of %d with Limit %d per %v is a tolerance of more than 3,000 years", r.Burst, r.Limit, r.Period)
		}
	case Calendar:
		if r.Burst != r.Limit {
			return "Burst", "applies to paced rules only"
		}
		if r.Unit < Minute || r.Unit > Month {
			return "Unit", fmt.Sprintf("must be Minute, Hour, Day or Month, got %d", int(r.Unit))
		}
		if r.Loc == nil {
			return "Location", "must not be nil (use time.UTC or time.LoadLocation)"
		}
		if r.Grace < 0 || r.Grace >= time.Minute {
			return "Grace", fmt.Sprintf("must be within [0, 1m), got %v", r.Grace)
		}
	}
	return "", ""
}

// Derive fills the derived values of a valid rule.
func (r *Rule) Derive() {
	switch r.Kind {
	case Paced:
		// T = Period / (Limit - Burst + 1), rounded up to the microsecond:
		// rounding down would admit more than Limit in a Period.
		slots := r.Limit - r.Burst + 1
		periodUs := ceilDiv(int64(r.Period), int64(time.Microsecond))
		r.IntervalUs = ceilDiv(periodUs, slots)
		r.ToleranceUs = (r.Burst - 1) * r.IntervalUs
		r.ArgT = strconv.FormatInt(r.IntervalUs, 10)
		r.ArgTol = strconv.FormatInt(r.ToleranceUs, 10)
	case Concurrency:
		r.LeaseUs = int64(r.Period / time.Microsecond)
		r.ArgT = strconv.FormatInt(r.LeaseUs, 10)
	case Window:
		r.PeriodUs = ceilDiv(int64(r.Period), int64(time.Microsecond))
		r.ResolutionUs = 1
		if r.Limit > WindowExactLimit {
			r.ResolutionUs = max(1, r.PeriodUs/WindowBuckets)
		}
		r.ArgT = strconv.FormatInt(r.PeriodUs, 10)
		r.ArgTol = strconv.FormatInt(r.ResolutionUs, 10)
	}
	if r.AheadCapped {
		r.ArgAhead = strconv.FormatInt(r.MaxAheadUs, 10)
	}
}

// SetMaxBookAhead records a WithMaxBookAhead cap: at least 1µs when d is
// positive, negative (rejected by Validate) when d is.
func (r *Rule) SetMaxBookAhead(d time.Duration) {
	r.AheadCapped = true
	r.MaxAheadUs = int64(d / time.Microsecond)
	if d > 0 && r.MaxAheadUs == 0 {
		r.MaxAheadUs = 1
	}
	if d < 0 {
		r.MaxAheadUs = -1
	}
}

// CheckKey rejects an empty key and one over MaxKeyLen bytes.
func CheckKey(key string) error {
	if key == "" {
		return errors.New("must not be empty")
	}
	if len(key) > MaxKeyLen {
		return fmt.Errorf("is %d bytes long, more than %d", len(key), MaxKeyLen)
	}
	return nil
}

// Windows returns four consecutive window starts around t, in microseconds
// since the Unix epoch, shifted by the rule's grace: the window before the
// one holding t, that one, and the two after. The Redis script picks among
// them with Redis's clock, which may differ a little from ours.
func (r *Rule) Windows(t time.Time) [4]int64 {
	t = t.In(r.Loc).Add(-r.Grace)
	var start time.Time
	y, m, d := t.Date()
	switch r.Unit {
	case Minute:
		start = t.Truncate(time.Minute)
	case Hour:
		start = time.Date(y, m, d, t.Hour(), 0, 0, 0, r.Loc)
	case Day:
		start = time.Date(y, m, d, 0, 0, 0, 0, r.Loc)
	case Month:
		start = time.Date(y, m, 1, 0, 0, 0, 0, r.Loc)
	}
	var out [4]int64
	for i := -1; i <= 2; i++ {
		out[i+1] = r.step(start, i).Add(r.Grace).UnixMicro()
	}
	return out
}

// step moves a window start by n windows, following the location's calendar
// (days of 23 or 25 hours across a DST change, months of 28 to 31 days).
func (r *Rule) step(start time.Time, n int) time.Time {
	switch r.Unit {
	case Minute:
		return start.Add(time.Duration(n) * time.Minute)
	case Hour:
		return start.Add(time.Duration(n) * time.Hour)
	case Day:
		return start.AddDate(0, 0, n)
	default:
		return start.AddDate(0, n, 0)
	}
}

// WindowEnd is when the calendar window holding t ends (the next one
// starts); the zero time for other rules.
func (r *Rule) WindowEnd(t time.Time) time.Time {
	if r.Kind != Calendar {
		return time.Time{}
	}
	b := r.Windows(t)
	if t.UnixMicro() < b[1] {
		return time.UnixMicro(b[1])
	}
	return time.UnixMicro(b[2])
}

// ceilDiv is a / b rounded up, for a >= 0 and b > 0, without the overflow
// of a + b - 1 when b is near MaxInt64 (a Limit that high made the
// interval 0 and Validate divide by it).
func ceilDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 {
		q++
	}
	return q
}
