package limiter

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Limiter decides, for one outbound request, whether and when it may be sent.
//
// Reserve checks every shared penalty the request names and every rule it
// carries in one step, all or none: it admits now, books a slot ahead when the
// wait fits Request.MaxWait, or refuses and charges nothing. Implementations
// are safe for concurrent use; the Redis one shares its state across replicas.
type Limiter interface {
	// Reserve takes a slot for req. A refusal is a Reservation with OK false,
	// not an error: errors mean the limiter itself failed (Redis unreachable,
	// an invalid request).
	Reserve(ctx context.Context, req Request) (Reservation, error)

	// Cancel gives back a slot that Reserve booked for req and that will not
	// be used. Each rule gets its slot back when nothing was booked after it;
	// otherwise the slot is kept, so the contract still holds.
	Cancel(ctx context.Context, req Request, res Reservation) error

	// Release ends the in-flight leases of a sent request's concurrency
	// rules, once its answer has arrived. It does nothing for other rules.
	Release(ctx context.Context, req Request, res Reservation) error

	// Penalize marks scope of group as penalised until the given time: every
	// Reserve naming that scope refuses until then. A later end extends an
	// existing penalty; an earlier one never shortens it.
	Penalize(ctx context.Context, group string, p Penalty) error
}

// Request is what one outbound request asks of a Limiter.
type Request struct {
	// Group keeps the keys of related requests together: the Redis limiter
	// puts every key of a group under one hash tag (one cluster slot), so
	// one script call can check and charge all of them.
	Group string
	// Rules are charged together, all or none.
	Rules []Rule
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

// Reservation is a Limiter's answer.
type Reservation struct {
	// OK is true when a slot was taken: send after Delay.
	OK bool
	// Delay is how long to wait before sending, when OK.
	Delay time.Duration
	// RetryAfter is, when refused by a rule, how long until a request like
	// this one would be admitted at once (if nobody else takes the slot);
	// when refused by a penalty, how long until the penalty ends.
	RetryAfter time.Duration
	// Rule is the index in Request.Rules of the rule that set Delay or
	// RetryAfter, or -1 when no rule held the request back.
	Rule int
	// Penalty is set when a shared penalty refused the request.
	Penalty *Penalty
	// Now is the limiter's clock (Redis TIME for the Redis limiter) when it
	// decided. Now.Add(Delay) is the scheduled send time.
	Now time.Time
	// Booked is the state each rule moved to; Cancel uses it to tell whether
	// the slot is still the last one booked.
	Booked []int64

	// local marks a slot a Failover granted without its primary.
	local bool
	// answered is when the answer reached this process (local clock), if
	// the limiter is remote; see Wait.
	answered time.Time
	// lost marks a slot Redis booked after losing the group's state (see
	// reserve.lua's epoch): it may overlap slots booked before.
	lost bool
}

// Local reports whether the slot was granted by a fallback while the shared
// limiter was away, rather than by the shared limiter.
func (r Reservation) Local() bool { return r.local }

// SendAt is the scheduled send time on the limiter's clock.
func (r Reservation) SendAt() time.Time { return r.Now.Add(r.Delay) }

// Wait is how long from now until the slot: Delay less the time since the
// limiter's answer reached this process, so time spent after the answer
// arrived (handing it to a queued caller, recording telemetry) does not
// make the send late. It is never shorter than the true wait: the limiter
// decided before its answer arrived. Sleep Wait, not Delay.
func (r Reservation) Wait() time.Duration {
	if r.answered.IsZero() {
		return r.Delay
	}
	return r.Delay - time.Since(r.answered)
}

// Penalty is a provider's ban on one scope, shared by every replica.
type Penalty struct {
	Scope string
	Until time.Time
	// Code is the provider's error code that caused it, for errors and
	// telemetry.
	Code string
}

// Sentinel errors.
var (
	// ErrInvalidRequest reports a request the limiter cannot evaluate (a zero
	// Rule, an empty or oversized scope, a negative MaxWait).
	ErrInvalidRequest = errors.New("limiter: invalid request")
	// ErrUnavailable wraps failures of the limiter's store (e.g. Redis).
	ErrUnavailable = errors.New("limiter: store unavailable")
)

func (req *Request) validate() error {
	if req.MaxWait < 0 {
		return fmt.Errorf("%w: MaxWait must not be negative, got %v", ErrInvalidRequest, req.MaxWait)
	}
	if err := checkKey("group", req.Group); err != nil {
		return fmt.Errorf("%w: Group %v", ErrInvalidRequest, err)
	}
	for i := range req.Rules {
		if req.Rules[i].limit < 1 {
			return fmt.Errorf("%w: Rules[%d] is not a rule built by NewRule or NewCalendarRule", ErrInvalidRequest, i)
		}
	}
	for i, s := range req.Scopes {
		if err := checkKey("scope", s); err != nil {
			return fmt.Errorf("%w: Scopes[%d] %v", ErrInvalidRequest, i, err)
		}
	}
	return nil
}

func (p Penalty) validate(group string) error {
	if err := checkKey("group", group); err != nil {
		return fmt.Errorf("%w: group %v", ErrInvalidRequest, err)
	}
	if err := checkKey("scope", p.Scope); err != nil {
		return fmt.Errorf("%w: Penalty.Scope %v", ErrInvalidRequest, err)
	}
	if p.Until.IsZero() {
		return fmt.Errorf("%w: Penalty.Until must be set", ErrInvalidRequest)
	}
	return nil
}
