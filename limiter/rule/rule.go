package rule

import (
	"fmt"
	"time"

	"github.com/quotaware/throttle/limiter/internal/rulecore"
)

// MaxKeyLen bounds a rule key (and a limiter's group and penalty scope), so
// that keys built from request paths cannot grow Redis memory or log lines
// without limit.
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

// String implements fmt.Stringer.
func (u Unit) String() string { return rulecore.Unit(u).String() }

// Rule is one limit a provider enforces. It is immutable and valid once built
// by [New], [NewWindow], [NewCalendar] or [NewConcurrency]; the zero Rule is
// invalid.
//
// A paced rule keeps "at most Limit requests in any window of length Period",
// with up to a burst of them back to back after an idle spell (GCRA). A window
// rule keeps the same contract but lets a whole burst through as soon as the
// window has room (a sliding log). A calendar rule keeps "at most Limit
// requests in each fixed window" (a minute, hour, day or month aligned in a
// location), for quotas that reset at a wall-clock time.
type Rule struct{ c rulecore.Rule }

func init() {
	rulecore.Of = func(r *Rule) *rulecore.Rule { return &r.c }
}

// Option tunes a rule when it is built.
type Option interface{ apply(*rulecore.Rule) }

type optionFunc func(*rulecore.Rule)

func (f optionFunc) apply(r *rulecore.Rule) { f(r) }

// WithBurst lets n requests of a paced rule go back to back after an idle
// spell (default 1: evenly paced at the full rate). A larger burst costs
// sustained rate: the rule still admits at most Limit in any Period.
func WithBurst(n int) Option { return optionFunc(func(r *rulecore.Rule) { r.Burst = int64(n) }) }

// WithGrace starts every calendar window d late, so that a clock that runs a
// little ahead of the provider's never opens a new day or month early.
func WithGrace(d time.Duration) Option { return optionFunc(func(r *rulecore.Rule) { r.Grace = d }) }

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
func WithMaxBookAhead(d time.Duration) Option {
	return optionFunc(func(r *rulecore.Rule) { r.SetMaxBookAhead(d) })
}

// Error reports an invalid rule, naming the field at fault.
type Error struct {
	// Key is the rule's key, as given.
	Key string
	// Field names what is wrong ("Limit", "Period", ...).
	Field string
	// Reason says why, with the value given.
	Reason string
}

// Error implements error.
func (e *Error) Error() string {
	return fmt.Sprintf("rule %q: %s %s", e.Key, e.Field, e.Reason)
}

// build applies the options to c, validates and derives it.
func build(c rulecore.Rule, opts []Option) (Rule, error) {
	for _, o := range opts {
		o.apply(&c)
	}
	if field, reason := c.Validate(); field != "" {
		return Rule{}, &Error{Key: c.Key, Field: field, Reason: reason}
	}
	c.Derive()
	return Rule{c: c}, nil
}

// New builds a paced rule: at most limit requests in any window of length
// period, spread evenly (GCRA): 20 per second becomes one every 50 ms. Use it
// for short windows the provider counts in fixed wall-clock seconds, where
// even spacing plus a jitter allowance keeps every provider second within
// the limit; use [NewWindow] where the provider lets a whole burst
// through as long as the window has room (minute, hour, robot and chat
// limits). Options: [WithBurst], [WithMaxBookAhead].
func New(key string, limit int, period time.Duration, opts ...Option) (Rule, error) {
	return build(rulecore.Rule{Kind: rulecore.Paced, Key: key, Limit: int64(limit), Period: period, Burst: 1}, opts)
}

// NewWindow builds a sliding-window rule: at most limit requests in any
// window of length period, exactly, admitting a burst at once as long as the
// window has room (20 per minute lets 6 messages go together, where a paced
// rule would send one every 3 s). Use it where the provider's window is a
// minute or longer, or for robot and chat limits; pair it with a paced
// per-second rule ([New]) where the provider also caps the rate within
// a second (Feishu's 50/s beside 1000/min), since that rule then bounds
// how fast a burst goes out.
//
// A key holds at most 128 groups of send times whatever the traffic: up to
// a limit of 64 every send time is kept and the rule admits exactly what a
// sliding-window log would; above it, sends within Period/64 of one another
// are counted together at the latest of them, so a send may wait up to
// Period/64 longer than an exact log would let it, never shorter.
// Options: [WithMaxBookAhead].
func NewWindow(key string, limit int, period time.Duration, opts ...Option) (Rule, error) {
	return build(rulecore.Rule{Kind: rulecore.Window, Key: key, Limit: int64(limit), Period: period, Burst: int64(limit)}, opts)
}

// NewCalendar builds a calendar rule: at most limit requests in each
// window of the given unit, aligned in loc (e.g. a day or a month in
// Asia/Shanghai). Options: [WithGrace].
func NewCalendar(key string, limit int, unit Unit, loc *time.Location, opts ...Option) (Rule, error) {
	return build(rulecore.Rule{Kind: rulecore.Calendar, Key: key, Limit: int64(limit), Unit: rulecore.Unit(unit), Loc: loc, Burst: int64(limit)}, opts)
}

// NewConcurrency builds a concurrency rule: at most limit requests in
// flight at once (WeCom's 45033 "api concurrent out of limit"). Each request
// holds a lease from its reservation until the Transport releases it when
// the answer arrives; a lease not released (a crashed replica) lapses after
// lease, so it cannot hold a slot for ever. Set lease above the slowest
// answer you expect.
func NewConcurrency(key string, limit int, lease time.Duration) (Rule, error) {
	return build(rulecore.Rule{Kind: rulecore.Concurrency, Key: key, Limit: int64(limit), Burst: int64(limit), Period: lease}, nil)
}

// Must is like a rule constructor's result but panics on error; for
// package-level rules whose values are constants.
func Must(r Rule, err error) Rule {
	if err != nil {
		panic(err)
	}
	return r
}

// WithKey returns the same limit under another key, e.g. one per API path.
func (r Rule) WithKey(key string) (Rule, error) {
	if err := rulecore.CheckKey(key); err != nil {
		return Rule{}, &Error{Key: key, Field: "Key", Reason: err.Error()}
	}
	r.c.Key = key
	return r, nil
}

// Key is the rule's key.
func (r Rule) Key() string { return r.c.Key }

// Limit is the most requests the rule admits in a Period or calendar window.
func (r Rule) Limit() int { return int(r.c.Limit) }

// Period is a paced or window rule's window, or a concurrency rule's lease;
// zero for a calendar rule.
func (r Rule) Period() time.Duration { return r.c.Period }

// Unit is a calendar rule's window; zero for the other kinds, so it also
// tells a calendar rule apart.
func (r Rule) Unit() Unit { return Unit(r.c.Unit) }

// MaxBookAhead is the cap set by [WithMaxBookAhead], and whether one was
// set: a request this rule would hold back longer is refused uncharged and
// should ask again after its RetryAfter.
func (r Rule) MaxBookAhead() (d time.Duration, capped bool) {
	return time.Duration(r.c.MaxAheadUs) * time.Microsecond, r.c.AheadCapped
}

// IsConcurrency reports whether the rule caps requests in flight.
func (r Rule) IsConcurrency() bool { return r.c.Kind == rulecore.Concurrency }

// Interval is how far apart a paced rule's slots lie under excess demand:
// Period/(Limit-Burst+1), rounded up to the microsecond. Zero for the
// other kinds.
func (r Rule) Interval() time.Duration {
	if r.c.Kind != rulecore.Paced || r.c.Limit <= 0 {
		return 0
	}
	return time.Duration(r.c.IntervalUs) * time.Microsecond
}

// String implements fmt.Stringer.
func (r Rule) String() string {
	c := &r.c
	switch c.Kind {
	case rulecore.Calendar:
		return fmt.Sprintf("%s: %d per %s (%s)", c.Key, c.Limit, c.Unit, c.Loc)
	case rulecore.Concurrency:
		return fmt.Sprintf("%s: %d in flight", c.Key, c.Limit)
	case rulecore.Window:
		return fmt.Sprintf("%s: %d in any %v", c.Key, c.Limit, c.Period)
	}
	if c.Burst > 1 {
		return fmt.Sprintf("%s: %d per %v, burst %d", c.Key, c.Limit, c.Period, c.Burst)
	}
	return fmt.Sprintf("%s: %d per %v", c.Key, c.Limit, c.Period)
}
