package throttle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/rule"
	"go.opentelemetry.io/otel/attribute"
)

// reserve takes a slot, or returns the error that refuses the request. A
// request refused for want of an in-flight lease (a concurrency rule), or
// by a narrow rule that does not book ahead (rule.WithMaxBookAhead: one
// chat or member among many sharing the app's rules), asks again when the
// rule's slot comes, if that is within its budget; otherwise it fails at
// once, as x/time/rate's Wait does.
func (c *call) reserve(ctx context.Context, lreq *limiter.Request) (limiter.Reservation, error) {
	for {
		var began time.Time
		if !c.t.tel.disabled {
			began = time.Now() // clock reads cost ~100ns here; skip them when nobody records
		}
		// A lift heard while the call is in flight ends a penalty its
		// reply may still carry.
		seen := c.p.lifts.seen()
		res, err := c.t.limiter.Reserve(ctx, *lreq)
		if !c.t.tel.disabled {
			c.t.tel.limiterCall(ctx, c, time.Since(began))
		}
		if err != nil {
			if cerr := ctxEnded(ctx); cerr != nil {
				// The caller gave up (or its deadline passed) during the
				// call: that says nothing about the limiter.
				c.outcome = outcomeCancelled
				return res, cerr
			}
			if errors.Is(err, limiter.ErrInvalidRequest) {
				// The profile's route cannot be limited (a scope too
				// long, say): a configuration error, not an outage.
				c.outcome = outcomeRouteError
				return res, fmt.Errorf("throttle: %s %s: %w", c.p.Name, c.route.API, err)
			}
			c.outcome = outcomeLimiterError
			return res, &LimiterError{Provider: c.p.Name, API: c.route.API, Err: err}
		}
		if res.OK() {
			return res, nil
		}
		if pen := res.Penalty(); pen != nil {
			if c.p.lifts.ended(pen.Scope, pen.Code, seen) {
				// Read before a lift that ended it (a reset's lifts
				// among them): ask again rather than open the breaker
				// for its whole end.
				continue
			}
			// Another replica saw the quota error: stop locally too.
			until := c.p.stop(pen.Scope, pen.Until, pen.Code, "shared limiter")
			if c.p.lifts.ended(pen.Scope, pen.Code, seen) {
				// A lift came between the check and the stop, and may
				// have swept the breaker before it opened.
				c.p.breakers.LiftIf(pen.Scope, until, pen.Code)
				continue
			}
			c.outcome = outcomePenalized
			return res, c.penaltyError(pen.Scope, until, pen.Code)
		}
		var bound rule.Rule
		if i := res.Rule(); i >= 0 && i < len(lreq.Rules) {
			bound = lreq.Rules[i]
		}
		_, heldBack := bound.MaxBookAhead()
		if (bound.IsConcurrency() || heldBack) && res.RetryAfter() <= c.budget(ctx) {
			wait := res.RetryAfter()
			if heldBack {
				wait -= c.lead(ctx, bound)
				if !c.t.tel.disabled {
					c.event("throttle.entity_wait", attribute.Float64("throttle.wait_s", wait.Seconds()))
				}
			}
			if err := sleepCtx(ctx, wait); err != nil {
				c.outcome = outcomeCancelled
				return res, err
			}
			c.waited += wait
			lreq.MaxWait = c.budget(ctx)
			continue
		}
		c.outcome = outcomeThrottled
		return res, c.throttled(lreq, res, res.RetryAfter())
	}
}

// throttled is the error of a request whose slot, retryAfter away, lies
// past its budget.
func (c *call) throttled(lreq *limiter.Request, res limiter.Reservation, retryAfter time.Duration) *ThrottledError {
	e := &ThrottledError{Provider: c.p.Name, API: c.route.API, RetryAfter: retryAfter, Budget: lreq.MaxWait}
	var bound rule.Rule
	if i := res.Rule(); i >= 0 && i < len(lreq.Rules) {
		bound = lreq.Rules[i]
	}
	switch {
	case bound.Limit() > 0:
		e.Rule = bound.String()
	case res.Local():
		// No rule of its own held it: a replica limiting on its own
		// starts its slots after those the shared limiter booked.
		e.Rule = "the local fallback's hold behind the shared limiter's booked slots"
	default:
		e.Rule = "the limiter"
	}
	return e
}

// lead is how long before a held-back request's slot it asks again: the
// rule admits a request up to its cap ahead (rule.WithMaxBookAhead), so
// the first to ask within the cap takes the slot. A request that has used
// more of its budget asks earlier, so an entity's waiters, on every
// replica, go about in the order they came and the oldest is not the one
// to miss its deadline.
func (c *call) lead(ctx context.Context, r rule.Rule) time.Duration {
	ahead, _ := r.MaxBookAhead()
	age, left := time.Since(c.start), c.budget(ctx)
	if ahead <= 0 || age <= 0 {
		return 0
	}
	return time.Duration(float64(ahead) * float64(age) / float64(age+left))
}

// sleepCtx sleeps d on a timer (a retry's backoff, a wait for a rule's
// slot), returning early with the context's error; d <= 0 only checks ctx.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ctxEnded returns the context's error, or context.DeadlineExceeded once
// its deadline has passed though the context does not say so yet: its
// timer fires a little after the deadline, and the limiter's call, bounded
// by the same deadline, may fail on it first.
func ctxEnded(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

// contextError is the error of a wait cut short: the context's own error
// when it is done, so errors.Is finds context.Canceled or
// context.DeadlineExceeded and nothing else.
func contextError(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	return err
}
