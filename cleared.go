package throttle

import (
	"context"
	"errors"
	"time"

	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/inspect"
	"github.com/quotaware/throttle/providers"
)

// A provider's reset of its own quotas (providers.Verdict.Cleared, WeChat's
// clear_quota): the penalties it ended are lifted and the calendar windows
// it reset start again from zero, on every replica. Without it, a quota an
// operator cleared at noon stayed refused here until midnight.

// clearTimeout bounds the work of one reset.
const clearTimeout = 5 * time.Second

// conditionalLifter is a limiter that lifts a penalty only while it is the
// one read (limiter.Shared): a reset must not end a newer penalty.
type conditionalLifter interface {
	LiftPenaltyIf(ctx context.Context, group, scope string, seen *inspect.PenaltyState) (bool, error)
}

// applyCleared ends what a reset ended before the caller gets the reset's
// answer, so that the caller's next call, on any replica, finds it done.
// Resets are rare (WeChat allows 10 a month), so the work (a scan of the
// group's penalty keys, a lift and its announcement per penalty ended, one
// script call for the counts) stays on the request path, bounded by
// clearTimeout whatever the request's context: a caller that gives up on
// the answer must not leave the fleet half cleared.
func (t *Transport) applyCleared(ctx context.Context, p *profile, c *providers.Cleared) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), clearTimeout)
	defer cancel()
	var lifted int
	var errs []error
	if c.Lifts != nil {
		lifted, errs = t.liftCleared(ctx, p, c.Lifts)
	}
	cleared := 0
	if cc, ok := t.limiter.(limiter.CalendarClearer); ok && len(c.Rules) > 0 {
		if err := cc.ClearCalendar(ctx, p.Name, c.Rules); err != nil {
			errs = append(errs, err)
		} else {
			cleared = len(c.Rules)
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.tel.log.Warn("throttle: the provider reset its quotas, but not all of what it ended could be ended here; the rest ends when its window does",
			"provider", p.Name, "penalties_lifted", lifted, "counts_cleared", cleared, "error", err)
		return
	}
	t.tel.log.Info("throttle: the provider reset its quotas; the penalties and counts it reset end now",
		"provider", p.Name, "penalties_lifted", lifted, "counts_cleared", cleared)
}

// liftCleared lifts every penalty of p that lifts accepts: the shared ones
// (each only while it is the one read) and this replica's own breakers.
func (t *Transport) liftCleared(ctx context.Context, p *profile, lifts func(scope, code string) bool) (lifted int, errs []error) {
	done := map[string]bool{}
	plain, _ := t.limiter.(limiter.PenaltyLifter)
	if r, ok := t.limiter.(limiter.PenaltyReader); ok {
		states, err := r.Penalties(ctx, p.Name)
		if err != nil {
			errs = append(errs, err)
		}
		for i := range states {
			ps := &states[i]
			if !lifts(ps.Scope, ps.Code) {
				continue
			}
			done[ps.Scope] = true
			var err error
			if cl, ok := t.limiter.(conditionalLifter); ok && ps.Value != "" {
				_, err = cl.LiftPenaltyIf(ctx, p.Name, ps.Scope, ps)
			} else if plain != nil {
				_, err = plain.LiftPenalty(ctx, p.Name, ps.Scope)
			}
			if errors.Is(err, limiter.ErrPenaltyChanged) {
				continue // a penalty recorded since the reset stands
			}
			if err != nil {
				errs = append(errs, err)
			}
			p.breakers.Lift(ps.Scope)
			lifted++
		}
	}
	// Penalties this replica holds that Redis does not (written later,
	// or lost): the lift also tells the other replicas.
	for _, scope := range p.breakers.Scopes(lifts) {
		if done[scope] {
			continue
		}
		p.breakers.Lift(scope)
		if plain != nil {
			if _, err := plain.LiftPenalty(ctx, p.Name, scope); err != nil {
				errs = append(errs, err)
			}
		}
		lifted++
	}
	return lifted, errs
}
