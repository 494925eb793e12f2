package limiter

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/quotaware/throttle/limiter/inspect"
	"github.com/quotaware/throttle/limiter/internal/rulecore"
	"github.com/quotaware/throttle/limiter/rule"
)

// Limiter decides, for one outbound request, whether and when it may be sent.
//
// Reserve checks every shared penalty the request names and every rule it
// carries in one step, all or none: it admits now, books a slot ahead when the
// wait fits Request.MaxWait, or refuses and charges nothing. The answer is a
// Reservation, which also gives the slot back (Cancel) and ends in-flight
// leases (Release). Implementations are safe for concurrent use; Shared
// shares its state across replicas through Redis, Memory keeps it in one
// process. An implementation outside this package answers with Admit and
// Refuse, and can check itself with package limitertest.
type Limiter interface {
	// Reserve takes a slot for req. A refusal is a Reservation whose OK is
	// false, not an error: errors mean the limiter itself failed (Redis
	// unreachable, an invalid request). req's Rules and Scopes are read
	// until its slot is settled, which for a wait cancelled while a shared
	// call is in flight is after Reserve returns (the slot is given back
	// then): do not change their elements once they are passed.
	Reserve(ctx context.Context, req Request) (Reservation, error)

	// Penalize marks scope of group as penalised until the given time: every
	// Reserve naming that scope refuses until then. A later end extends an
	// existing penalty; an earlier one never shortens it.
	Penalize(ctx context.Context, group string, p Penalty) error
}

// A Limiter may also do what some of the Transport's features need; those
// it cannot do are left out, not faked. Memory and Shared do them all.

// PenaltyLifter is a Limiter that can end a shared penalty at once
// (throttle.Transport.LiftPenalty; without it that returns an error that is
// errors.ErrUnsupported). It reports whether a penalty was there.
type PenaltyLifter interface {
	LiftPenalty(ctx context.Context, group, scope string) (bool, error)
}

// CalendarReader is a Limiter that can report how much of each calendar
// rule's period is used (the Transport's throttle.quota.used gauges; without
// it they stay empty), one count per rule, in order.
type CalendarReader interface {
	CalendarUsed(ctx context.Context, group string, rules []rule.Rule) ([]int64, error)
}

// CalendarClearer is a Limiter that can start the current window of
// calendar rules again from zero for every replica, when the provider has
// reset its own count (a WeChat clear_quota the Transport saw succeed;
// without it the cleared quota stays spent here until its window ends).
type CalendarClearer interface {
	ClearCalendar(ctx context.Context, group string, rules []rule.Rule) error
}

// ResetRecorder is a Limiter that remembers, for every replica, that the
// provider reset the quota behind scopes of a group, ending its penalties
// of code there (a WeChat clear_quota the Transport saw succeed). An answer
// of that code to a call sent before the reset may still arrive, at any
// replica: a penalty of the code on one of the scopes whose Sent is before
// the reset is then not recorded (ErrStalePenalty). Without it, such an
// answer at a replica that did not see the reset shut the scope again
// until the provider's window ended.
type ResetRecorder interface {
	RecordReset(ctx context.Context, group, code string, scopes []string) error
}

// PenaltyReader is a Limiter that can read the penalties in force of
// scopes of a group, for the Transport to lift those a provider's reset of
// its quotas ended.
type PenaltyReader interface {
	Penalties(ctx context.Context, group string, scopes []string) ([]inspect.PenaltyState, error)
}

// StoredPenalizer is a Limiter whose Penalize can say what it stored, so
// that its caller can later lift exactly that penalty (with LiftPenaltyIf)
// and never one recorded since: the Transport's penalty write does when a
// provider's reset came while it wrote.
type StoredPenalizer interface {
	// PenalizeStored is Penalize that also returns the value stored, ""
	// when none was.
	PenalizeStored(ctx context.Context, group string, p Penalty) (stored string, err error)
}

var (
	_ StoredPenalizer = (*Shared)(nil)
	_ PenaltyReader   = (*Memory)(nil)
	_ PenaltyReader   = (*Shared)(nil)
	_ PenaltyLifter   = (*Memory)(nil)
	_ PenaltyLifter   = (*Shared)(nil)
	_ CalendarReader  = (*Memory)(nil)
	_ CalendarReader  = (*Shared)(nil)
	_ CalendarClearer = (*Memory)(nil)
	_ CalendarClearer = (*Shared)(nil)
	_ ResetRecorder   = (*Shared)(nil)
)

// Request is what one outbound request asks of a Limiter.
type Request struct {
	// Group keeps the keys of related requests together: the Redis limiter
	// puts every key of a group under one hash tag (one cluster slot), so
	// one script call can check and charge all of them.
	Group string
	// Rules are charged together, all or none.
	Rules []rule.Rule
	// Scopes are the penalty scopes the request belongs to (the API of an
	// app, the app, the egress IP, ...). A penalised scope refuses the request.
	Scopes []string
	// MaxWait is the longest the caller accepts to wait for a slot; a slot
	// further ahead is refused. Zero admits only requests that can go now.
	MaxWait time.Duration

	// notBefore (µs) holds every slot back until then: a Failover that
	// takes over from Redis starts its local slots after the ones Redis
	// booked for this replica.
	notBefore int64
}

// Reservation is a Limiter's answer to one request: a slot (OK) to use
// after Delay, or a refusal that says why (RetryAfter, Penalty, Rule).
// Use Wait to sleep until the slot, Cancel to give back a slot that will not
// be used, and Release once the answer of a request with a concurrency rule
// has arrived. Its methods are not for concurrent use on one Reservation.
type Reservation struct {
	ok         bool
	delay      time.Duration
	retryAfter time.Duration
	ruleIndex  int
	penalty    *Penalty
	// now is the limiter's clock (Redis TIME for Redis) when it decided.
	now time.Time
	// booked is the state each rule moved to; cancel uses it to tell
	// whether the slot is still the last one booked.
	booked []int64
	// fleet is, for a refusal from Redis, each rule's state as Redis held
	// it, as the reply wrote them (see reserve.lua and states): how far
	// ahead the fleet booked, which a replica all of whose requests are
	// refused learns only from it.
	fleet string

	// from gave the slot, and takes it back; group and rules are what
	// it needs of the request to do so.
	from   giver
	group  string
	rules  []rule.Rule
	undone bool // cancelled, so a second Cancel does nothing
	// calendarUndone: CancelCalendar gave the calendar rules' slots back,
	// so Cancel gives back only the others.
	calendarUndone bool

	// local marks a slot a fallback granted without Redis.
	local bool
	// answered is when the answer reached this process (local clock), if
	// the limiter is remote, or when Memory decided; see Delay.
	answered time.Time
	// clock is the clock Delay counts down on (Memory's, which tests may
	// inject); nil means the process's.
	clock func() time.Time
	// lost marks a slot Redis booked after losing the group's state (see
	// state.lua's epoch): it may overlap slots booked before.
	lost bool
}

// giver is what a limiter of this package does for a Reservation it gave.
type giver interface {
	cancel(ctx context.Context, req Request, res Reservation) error
	release(ctx context.Context, req Request, res Reservation) error
}

// settle records in res what it needs to give its slot back to from.
func (res *Reservation) settle(from giver, req *Request) {
	res.from, res.group, res.rules = from, req.Group, req.Rules
}

func (res *Reservation) request() Request { return Request{Group: res.group, Rules: res.rules} }

// OK reports whether a slot was taken. When false, the request was
// refused and nothing was charged.
func (res *Reservation) OK() bool { return res.ok }

// Delay is how long from now until the slot: the wait the limiter decided
// less the time since its answer reached this process, so time spent after
// the answer arrived (handing it to a queued caller, recording telemetry)
// does not make the send late. It is never shorter than the true wait, and
// zero when the slot is now or the request was refused.
func (res *Reservation) Delay() time.Duration {
	if !res.ok {
		return 0
	}
	if res.answered.IsZero() {
		return res.delay
	}
	if res.clock != nil {
		return max(res.delay-res.clock().Sub(res.answered), 0)
	}
	return max(res.delay-time.Since(res.answered), 0)
}

// Wait sleeps until the slot, waking within about a tenth of a millisecond
// of it where the platform has a fine sleep (Linux; a Go timer wakes up to
// a millisecond late) and never before it. If ctx is done first, Wait
// returns the context's cause at once, and when ctx's deadline comes
// before the slot it fails at once, as x/time/rate's Wait does, with an
// error that matches context.DeadlineExceeded (the reservation's round
// trip may have taken part of the MaxWait given for the deadline). Either
// way the slot is not given back: call Cancel then (with Shared it is a
// Redis call, which a caller may want to make off its own path, as the
// Transport does). Wait on a refusal returns at once.
func (res *Reservation) Wait(ctx context.Context) error {
	if !res.ok {
		return nil
	}
	d := res.Delay()
	if dl, ok := ctx.Deadline(); ok && d > 0 && !time.Now().Add(d).Before(dl) {
		return fmt.Errorf("limiter: the slot is %v away, at or past the context's deadline: %w",
			d.Round(time.Microsecond), context.DeadlineExceeded)
	}
	return sleepFor(ctx, d)
}

// Cancel gives back a slot that will not be used. Each rule gets its slot
// back when nothing was booked after it; otherwise the slot is kept, so the
// limits still hold. A second Cancel, or Cancel of a refusal, does nothing.
// With Redis it is one script call, bounded by the limiter's timeout.
func (res *Reservation) Cancel(ctx context.Context) error {
	if !res.ok || res.undone || res.from == nil {
		return nil
	}
	res.undone = true
	if res.calendarUndone {
		req, part := res.part(false)
		return res.from.cancel(ctx, req, part)
	}
	return res.from.cancel(ctx, res.request(), *res)
}

// CancelCalendar gives back the slots of the calendar rules alone (a
// day's, a month's quota), as Cancel would, and keeps the others: for a
// request the provider refused without billing it against those quotas
// (DingTalk bills no call a QPS limit rejected against the month), whose
// pace was spent all the same. A Cancel after it gives back the rest; a
// second CancelCalendar does nothing. A Reservation made by Admit (a
// Limiter of another package) gives nothing back this way: its cancel
// cannot tell the rules apart.
func (res *Reservation) CancelCalendar(ctx context.Context) error {
	if !res.ok || res.undone || res.calendarUndone || res.from == nil {
		return nil
	}
	if _, whole := res.from.(funcGiver); whole {
		return nil
	}
	res.calendarUndone = true
	req, part := res.part(true)
	if len(req.Rules) == 0 {
		return nil
	}
	return res.from.cancel(ctx, req, part)
}

// part is the request and reservation of res's calendar rules (calendar
// true) or of its other rules, for a give-back of those alone.
func (res *Reservation) part(calendar bool) (Request, Reservation) {
	req := Request{Group: res.group}
	part := *res
	part.booked = nil
	for i := range res.rules {
		if (core(&res.rules[i]).Kind == rulecore.Calendar) != calendar {
			continue
		}
		req.Rules = append(req.Rules, res.rules[i])
		if i < len(res.booked) {
			part.booked = append(part.booked, res.booked[i])
		}
	}
	part.rules = req.Rules
	return req, part
}

// Release ends the in-flight leases of a sent request's concurrency rules,
// once its answer has arrived. It does nothing for other rules.
func (res *Reservation) Release(ctx context.Context) error {
	if !res.ok || res.undone || res.from == nil {
		return nil
	}
	return res.from.release(ctx, res.request(), *res)
}

// RetryAfter is, for a request refused by a rule, how long until a request
// like it would be admitted at once (if nobody else takes the slot); for
// one refused by a penalty, how long until the penalty ends.
func (res *Reservation) RetryAfter() time.Duration { return res.retryAfter }

// Penalty is the shared penalty that refused the request, or nil.
func (res *Reservation) Penalty() *Penalty { return res.penalty }

// Rule is the index in Request.Rules of the rule that set the delay or the
// refusal, or -1 when no rule held the request back.
func (res *Reservation) Rule() int { return res.ruleIndex }

// Local reports whether the slot was granted (or refused) by the replica's
// own share while Redis was away, rather than by Redis.
func (res *Reservation) Local() bool { return res.local }

// Admit is the answer of a Limiter implemented outside this package that
// takes a slot: decided at now on the store's clock (so SendAt is
// now+delay, as the store scheduled it), send after delay; rule is the
// index of the rule that set the delay (-1 for none). cancel and release,
// when not nil, are what Reservation.Cancel and Reservation.Release do.
func Admit(now time.Time, delay time.Duration, ruleIndex int, cancel, release func(context.Context) error) Reservation {
	return Reservation{ok: true, delay: delay, ruleIndex: ruleIndex, now: now, from: funcGiver{cancel, release}}
}

// Refuse is the answer of a Limiter implemented outside this package that
// refuses a request, decided at now on the store's clock: rule is the index
// of the rule that refused it (-1 for none), p the penalty that did (nil
// for none).
func Refuse(now time.Time, retryAfter time.Duration, ruleIndex int, p *Penalty) Reservation {
	return Reservation{retryAfter: retryAfter, ruleIndex: ruleIndex, penalty: p, now: now}
}

type funcGiver struct{ cancelFn, releaseFn func(context.Context) error }

func (g funcGiver) cancel(ctx context.Context, _ Request, _ Reservation) error {
	if g.cancelFn == nil {
		return nil
	}
	return g.cancelFn(ctx)
}

func (g funcGiver) release(ctx context.Context, _ Request, _ Reservation) error {
	if g.releaseFn == nil {
		return nil
	}
	return g.releaseFn(ctx)
}

// Penalty is a provider's ban on one scope, shared by every replica.
type Penalty struct {
	// Scope is what the penalty stops: a scope of the requests' Scopes.
	Scope string
	// Until is when it ends.
	Until time.Time
	// Code is the provider's error code that caused it, for errors and
	// telemetry.
	Code string
	// Stated marks an Until the provider stated on its own clock: Shared
	// keeps it as it is. Any other Until is taken as counted from this
	// replica's clock and moved onto Redis's by the replica's skew, when
	// that is more than a call's latency could explain.
	Stated bool
	// Sent is when the call whose answer gave the penalty was sent, on
	// this replica's clock; zero when unknown. A limiter that records the
	// provider's resets (ResetRecorder) does not record a penalty of a
	// reset's code on one of its scopes whose call was sent before the
	// reset: the provider answered it before the count it reports was
	// reset, and recorded it would shut the scope the reset opened, on
	// every replica. Penalize then returns ErrStalePenalty.
	Sent time.Time
}

// Sentinel errors.
var (
	// ErrInvalidRequest reports a request the limiter cannot evaluate (a zero
	// Rule, an empty or oversized scope, a negative MaxWait).
	ErrInvalidRequest = errors.New("limiter: invalid request")
	// ErrUnavailable wraps failures of the limiter's store (e.g. Redis).
	ErrUnavailable = errors.New("limiter: store unavailable")
	// ErrNotAnnounced reports a penalty written, or a lift done, in the
	// store but not announced (Redis refused or failed PUBLISH): replicas
	// meet a penalty on their next reserve of the scope rather than at
	// once, and keep a lifted scope's breaker open until their own copy of
	// the penalty ends.
	ErrNotAnnounced = errors.New("limiter: written to the store, not announced to the replicas")
	// ErrStalePenalty reports a penalty not recorded because the provider
	// reset the quota behind its scope after the call it answers was sent
	// (ResetRecorder, Penalty.Sent): nothing was written or announced, and
	// the caller's own copy of it should go too.
	ErrStalePenalty = errors.New("limiter: penalty not recorded: its call was sent before the provider reset the scope's quota")
	// ErrWindowEnded reports a provider's count (SetCalendarUsed) that
	// arrived after the window it was asked in had ended: it is
	// yesterday's count, and the new window keeps its own.
	ErrWindowEnded = errors.New("limiter: the count's window ended before it arrived")
)

func (req *Request) validate() error {
	if req.MaxWait < 0 {
		return fmt.Errorf("%w: MaxWait must not be negative, got %v", ErrInvalidRequest, req.MaxWait)
	}
	if err := checkGroup(req.Group); err != nil {
		return fmt.Errorf("%w: Group %v", ErrInvalidRequest, err)
	}
	for i := range req.Rules {
		if core(&req.Rules[i]).Limit < 1 {
			return fmt.Errorf("%w: Rules[%d] is not a rule built by package rule", ErrInvalidRequest, i)
		}
		// One key is one state: two rules of a request under one key
		// would be charged twice by some paths and once by others.
		k := req.Rules[i].Key()
		for j := range i {
			if k == req.Rules[j].Key() {
				return fmt.Errorf("%w: Rules[%d] has the key of Rules[%d] (%q): each rule of a request needs a key of its own", ErrInvalidRequest, i, j, k)
			}
		}
	}
	for i, s := range req.Scopes {
		if err := rulecore.CheckKey(s); err != nil {
			return fmt.Errorf("%w: Scopes[%d] %v", ErrInvalidRequest, i, err)
		}
	}
	return nil
}

// checkGroup reports a group name that cannot be used: one holding a
// brace would end the hash tag "{prefix:group}" of its Redis keys early, so
// that two groups could share a key ("a" with rule "b}:r:c" and "a}:r:b"
// with rule "c").
func checkGroup(group string) error {
	if err := rulecore.CheckKey(group); err != nil {
		return err
	}
	if strings.ContainsAny(group, "{}") {
		return fmt.Errorf("must not hold braces, got %q", group)
	}
	return nil
}

func (p Penalty) validate(group string) error {
	if err := checkGroup(group); err != nil {
		return fmt.Errorf("%w: group %v", ErrInvalidRequest, err)
	}
	if err := rulecore.CheckKey(p.Scope); err != nil {
		return fmt.Errorf("%w: Penalty.Scope %v", ErrInvalidRequest, err)
	}
	if p.Until.IsZero() {
		return fmt.Errorf("%w: Penalty.Until must be set", ErrInvalidRequest)
	}
	// Past it, a stored end reads as corrupt to the scripts and is
	// deleted (or overflows microseconds): accepted, it would be lost.
	if p.Until.After(lastPenaltyEnd) {
		return fmt.Errorf("%w: Penalty.Until must be within the year 9999, got %v", ErrInvalidRequest, p.Until)
	}
	return nil
}

// supersedes reports whether p replaces old, a penalty of the same scope,
// where one is kept per scope: it ends later, or as late from a later
// call. On a tie the later call's is kept, so that dropping a stale one
// (ErrStalePenalty) cannot take a fresh one of the same end with it
// (WeChat's 45009s all end at midnight).
func (p Penalty) supersedes(old Penalty) bool {
	return p.Until.After(old.Until) || p.Until.Equal(old.Until) && p.Sent.After(old.Sent)
}

// is reports whether p is the penalty o: the same end, code and call.
func (p Penalty) is(o Penalty) bool {
	return p.Until.Equal(o.Until) && p.Code == o.Code && p.Sent.Equal(o.Sent)
}

// lastPenaltyEnd is the latest end a penalty may have.
var lastPenaltyEnd = time.UnixMicro(lastShownUs)

// store is a Limiter of this package: it can take back what it gave.
type store interface {
	Limiter
	giver
}

// SendAt is when the slot is, on the limiter's clock (Redis TIME for
// Shared), for logs and for checking schedules; wait with Wait or Delay.
// For a refusal it is when the limiter decided, so SendAt plus RetryAfter
// is when a request like this one would be admitted at once.
func (res *Reservation) SendAt() time.Time { return res.now.Add(res.delay) }
