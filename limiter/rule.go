package limiter

import (
	"fmt"
	"strconv"
	"time"
)

// MaxKeyLen bounds a rule key or a penalty scope, so that keys built from
// request paths cannot grow Redis memory or log lines without limit.
const MaxKeyLen = 256

// Unit is the length of a calendar window.
type Unit int

// Calendar units. A window of each unit starts at the unit's boundary in the
// rule's location: the top of the minute or hour, local midnight, or the 1st of
// the month at midnight.
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

// Rule is one limit a provider enforces. It is immutable and valid once built
// by [NewRule], [NewWindowRule], [NewCalendarRule] or [NewConcurrencyRule];
// the zero Rule is invalid.
//
// A paced rule keeps "at most Limit requests in any window of length Period",
// with up to Burst of them back to back after an idle spell (GCRA). A window
// rule keeps the same contract but lets a whole burst through as soon as the
// window has room (a sliding log). A calendar rule keeps "at most Limit
// requests in each fixed window" (a minute, hour, day or month aligned in a
// location), for quotas that reset at a wall-clock time.
type Rule struct {
	kind   ruleKind
	key    string
	limit  int64
	period time.Duration
	burst  int64

	unit  Unit // calendar rules only
	loc   *time.Location
	grace time.Duration

	// Derived once, in microseconds, for the hot path.
	intervalUs  int64 // GCRA emission interval T, rounded up
	toleranceUs int64 // (Burst-1) * T
	// Boxed once: the Redis limiter passes them as script arguments.
	argT, argTol any

	leaseUs int64 // concurrency rules: how long a lease outlives a crash

	// Window rules: the period and the resolution of the log, in µs.
	periodUs, resolutionUs int64

	// WithMaxBookAhead: whether it was given, the cap (µs, never negative
	// once valid) and the cap boxed for the Redis script.
	aheadCapped bool
	maxAheadUs  int64
	argAhead    any
}

type ruleKind uint8

const (
	pacedRule ruleKind = iota
	calendarRule
	concurrencyRule
	windowRule
)

// RuleOption tunes a rule when it is built.
type RuleOption interface{ apply(*Rule) }

type ruleOptionFunc func(*Rule)

func (f ruleOptionFunc) apply(r *Rule) { f(r) }

// WithBurst lets n requests of a paced rule go back to back after an idle
// spell (default 1: evenly paced at the full rate). A larger burst costs
// sustained rate: the rule still admits at most Limit in any Period.
func WithBurst(n int) RuleOption { return ruleOptionFunc(func(r *Rule) { r.burst = int64(n) }) }

// WithGrace starts every calendar window d late, so that a clock that runs a
// little ahead of the provider's never opens a new day or month early.
func WithGrace(d time.Duration) RuleOption { return ruleOptionFunc(func(r *Rule) { r.grace = d }) }

// WithMaxBookAhead caps how far ahead of now a paced or window rule may book
// a slot: a request this rule would hold back longer than d is refused
// without charging any of its rules, with RetryAfter until this rule's own
// slot and Reservation.Rule naming it, so that the caller asks again then
// (the Transport does, within the request's wait budget).
//
// Use it for a narrow rule that is one of many entities sharing broader
// rules: one chat or recipient, one member, one robot. Without it a
// request held back by its own entity books every rule it carries at the
// entity's later slot; the app's shared rules then jump to that time and
// every other entity's request queues behind the busy one. With it the
// waiting request holds nothing until its entity's slot comes, and the
// shared capacity in between goes to the other entities.
//
// d = 0 never books this rule ahead. A little more (the presets use 50ms)
// books the shared rules at most that far ahead and lets the Transport ask
// again that much before the slot for a request that has used more of its
// budget, so that an entity's waiters go about in the order they came
// rather than in a race. Without the option (the default) a rule books as
// far ahead as Request.MaxWait allows.
func WithMaxBookAhead(d time.Duration) RuleOption {
	return ruleOptionFunc(func(r *Rule) {
		r.aheadCapped = true
		r.maxAheadUs = int64(d / time.Microsecond)
		if d > 0 && r.maxAheadUs == 0 {
			r.maxAheadUs = 1
		}
		if d < 0 {
			r.maxAheadUs = -1 // rejected by validate
		}
		r.argAhead = strconv.FormatInt(r.maxAheadUs, 10)
	})
}

// RuleError reports an invalid rule, naming the field at fault.
type RuleError struct {
	Key    string
	Field  string
	Reason string
}

func (e *RuleError) Error() string {
	return fmt.Sprintf("limiter: invalid rule %q: %s %s", e.Key, e.Field, e.Reason)
}

// NewRule builds a paced rule: at most limit requests in any window of length
// period, spread evenly (GCRA): 20 per second becomes one every 50 ms. Use it
// for short windows the provider counts in fixed wall-clock seconds, where
// even spacing plus a jitter allowance keeps every provider second within
// the limit; use [NewWindowRule] where the provider lets a whole burst
// through as long as the window has room (minute, hour, robot and chat
// limits). Options: [WithBurst], [WithMaxBookAhead].
func NewRule(key string, limit int, period time.Duration, opts ...RuleOption) (Rule, error) {
	r := Rule{key: key, limit: int64(limit), period: period, burst: 1}
	for _, o := range opts {
		o.apply(&r)
	}
	if err := r.validate(); err != nil {
		return Rule{}, err
	}
	// T = Period / (Limit - Burst + 1), rounded up to the microsecond:
	// rounding down would admit more than Limit in a Period.
	slots := r.limit - r.burst + 1
	periodUs := ceilDiv(int64(r.period), int64(time.Microsecond))
	r.intervalUs = ceilDiv(periodUs, slots)
	r.toleranceUs = (r.burst - 1) * r.intervalUs
	r.argT = strconv.FormatInt(r.intervalUs, 10)
	r.argTol = strconv.FormatInt(r.toleranceUs, 10)
	return r, nil
}

// NewCalendarRule builds a calendar rule: at most limit requests in each
// window of the given unit, aligned in loc (e.g. a day or a month in
// Asia/Shanghai). Options: [WithGrace].
func NewCalendarRule(key string, limit int, unit Unit, loc *time.Location, opts ...RuleOption) (Rule, error) {
	r := Rule{kind: calendarRule, key: key, limit: int64(limit), unit: unit, loc: loc, burst: int64(limit)}
	for _, o := range opts {
		o.apply(&r)
	}
	if err := r.validate(); err != nil {
		return Rule{}, err
	}
	return r, nil
}

// NewConcurrencyRule builds a concurrency rule: at most limit requests in
// flight at once (WeCom's 45033 "api concurrent out of limit"). Each request
// holds a lease from its reservation until the Transport releases it when
// the answer arrives; a lease not released (a crashed replica) lapses after
// lease, so it cannot hold a slot for ever. Set lease above the slowest
// answer you expect.
func NewConcurrencyRule(key string, limit int, lease time.Duration) (Rule, error) {
	r := Rule{kind: concurrencyRule, key: key, limit: int64(limit), burst: int64(limit), period: lease}
	if err := r.validate(); err != nil {
		return Rule{}, err
	}
	r.leaseUs = int64(lease / time.Microsecond)
	r.argT = strconv.FormatInt(r.leaseUs, 10)
	return r, nil
}

// MustRule is like a rule constructor's result but panics on error; for
// package-level rules whose values are constants.
func MustRule(r Rule, err error) Rule {
	if err != nil {
		panic(err)
	}
	return r
}

// WithKey returns the same limit under another key, e.g. one per API path.
func (r Rule) WithKey(key string) (Rule, error) {
	if err := checkKey("key", key); err != nil {
		return Rule{}, &RuleError{Key: key, Field: "Key", Reason: err.Error()}
	}
	r.key = key
	return r, nil
}

func (r Rule) validate() error {
	bad := func(field, reason string) error { return &RuleError{Key: r.key, Field: field, Reason: reason} }
	if err := checkKey("key", r.key); err != nil {
		return bad("Key", err.Error())
	}
	if r.limit < 1 {
		return bad("Limit", fmt.Sprintf("must be at least 1, got %d", r.limit))
	}
	if r.aheadCapped {
		if r.kind != pacedRule && r.kind != windowRule {
			return bad("MaxBookAhead", "applies to paced and window rules only")
		}
		if r.maxAheadUs < 0 {
			return bad("MaxBookAhead", "must not be negative")
		}
	}
	if r.kind == concurrencyRule {
		if r.period < time.Millisecond {
			return bad("Lease", fmt.Sprintf("must be at least 1ms, got %v", r.period))
		}
		return nil
	}
	if r.kind == pacedRule || r.kind == windowRule {
		if r.period <= 0 {
			return bad("Period", fmt.Sprintf("must be positive, got %v", r.period))
		}
		if r.period < time.Microsecond {
			return bad("Period", fmt.Sprintf("must be at least 1µs, got %v", r.period))
		}
		if r.burst < 1 || r.burst > r.limit {
			return bad("Burst", fmt.Sprintf("must be within 1..Limit (%d), got %d", r.limit, r.burst))
		}
		return nil
	}
	if r.unit < Minute || r.unit > Month {
		return bad("Unit", fmt.Sprintf("must be Minute, Hour, Day or Month, got %d", int(r.unit)))
	}
	if r.loc == nil {
		return bad("Location", "must not be nil (use time.UTC or time.LoadLocation)")
	}
	if r.grace < 0 || r.grace >= time.Minute {
		return bad("Grace", fmt.Sprintf("must be within [0, 1m), got %v", r.grace))
	}
	return nil
}

func checkKey(what, key string) error {
	if key == "" {
		return fmt.Errorf("must not be empty")
	}
	if len(key) > MaxKeyLen {
		return fmt.Errorf("is %d bytes long, more than %d", len(key), MaxKeyLen)
	}
	return nil
}

// Key is the rule's key.
func (r Rule) Key() string { return r.key }

// Limit is the most requests the rule admits in a Period or calendar window.
func (r Rule) Limit() int { return int(r.limit) }

// Period is a paced rule's window, or a concurrency rule's lease; zero for a
// calendar rule.
func (r Rule) Period() time.Duration { return r.period }

// Unit is a calendar rule's window; zero for the other kinds, so it also
// tells a calendar rule apart.
func (r Rule) Unit() Unit { return r.unit }

// MaxBookAhead is the cap set by [WithMaxBookAhead], and whether one was
// set: a request this rule would hold back longer is refused uncharged and
// should ask again after its RetryAfter.
func (r Rule) MaxBookAhead() (d time.Duration, capped bool) {
	return time.Duration(r.maxAheadUs) * time.Microsecond, r.aheadCapped
}

// IsConcurrency reports whether the rule caps requests in flight.
func (r Rule) IsConcurrency() bool { return r.kind == concurrencyRule }

func (r Rule) String() string {
	switch r.kind {
	case calendarRule:
		return fmt.Sprintf("%s: %d per %s (%s)", r.key, r.limit, r.unit, r.loc)
	case concurrencyRule:
		return fmt.Sprintf("%s: %d in flight", r.key, r.limit)
	case windowRule:
		return fmt.Sprintf("%s: %d in any %v", r.key, r.limit, r.period)
	}
	if r.burst > 1 {
		return fmt.Sprintf("%s: %d per %v, burst %d", r.key, r.limit, r.period, r.burst)
	}
	return fmt.Sprintf("%s: %d per %v", r.key, r.limit, r.period)
}

// windows returns four consecutive window starts around t, in microseconds
// since the Unix epoch, shifted by the rule's grace: the window before the
// one holding t, that one, and the two after. The Redis script picks among
// them with Redis's clock, which may differ a little from ours.
func (r Rule) windows(t time.Time) [4]int64 {
	t = t.In(r.loc).Add(-r.grace)
	var start time.Time
	y, m, d := t.Date()
	switch r.unit {
	case Minute:
		start = t.Truncate(time.Minute)
	case Hour:
		start = time.Date(y, m, d, t.Hour(), 0, 0, 0, r.loc)
	case Day:
		start = time.Date(y, m, d, 0, 0, 0, 0, r.loc)
	case Month:
		start = time.Date(y, m, 1, 0, 0, 0, 0, r.loc)
	}
	var out [4]int64
	for i := -1; i <= 2; i++ {
		out[i+1] = r.step(start, i).Add(r.grace).UnixMicro()
	}
	return out
}

// step moves a window start by n windows, following the location's calendar
// (days of 23 or 25 hours across a DST change, months of 28 to 31 days).
func (r Rule) step(start time.Time, n int) time.Time {
	switch r.unit {
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

// scale is the rule cut to a share of its limit (see scaleLimit), keeping
// its cap on booking ahead.
func (r Rule) scale(share float64) Rule {
	s := r.scaleLimit(share)
	s.aheadCapped, s.maxAheadUs, s.argAhead = r.aheadCapped, r.maxAheadUs, r.argAhead
	return s
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }
