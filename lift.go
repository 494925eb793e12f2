package throttle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/quotaware/throttle/limiter"
)

// LiftPenalty ends the penalty on scope of provider at once, for an operator
// who knows it should not be there (a garbled answer, a test run against
// production): this process's breaker closes, the shared penalty is
// deleted, and with Redis every running replica hears of it and closes its
// breaker too. A scope that the provider really penalises will answer with
// a quota error again and be penalised again. The throttlectl tool does the
// same from outside a service: throttlectl lift SCOPE -provider NAME.
// A limiter given with WithLimiter that cannot lift a penalty (not a
// limiter.PenaltyLifter, as limiter.Memory and limiter.Shared are) gives an
// error that is errors.ErrUnsupported.
func (t *Transport) LiftPenalty(ctx context.Context, provider, scope string) error {
	var p *profile
	for i := range t.profiles {
		if t.profiles[i].Name == provider {
			p = &t.profiles[i]
		}
	}
	if p == nil {
		return fmt.Errorf("throttle: LiftPenalty: no profile named %q", provider)
	}
	if scope == "" {
		return errors.New("throttle: LiftPenalty: scope must not be empty")
	}
	l, ok := t.limiter.(limiter.PenaltyLifter)
	if !ok {
		return fmt.Errorf("throttle: LiftPenalty: %w by the limiter %T", errors.ErrUnsupported, t.limiter)
	}
	p.lifts.lifted(scope)
	p.breakers.Lift(scope)
	if _, err := l.LiftPenalty(ctx, provider, scope); err != nil {
		return fmt.Errorf("throttle: LiftPenalty: %w", err)
	}
	// Again once the key is gone: a confirmation of the penalty's
	// announcement that read the key before may have opened the breaker
	// in between (the limiter drops those that come later).
	p.breakers.Lift(scope)
	return nil
}

// liftRouter closes this process's breaker when another replica (or
// throttlectl) lifts a penalty (the shared limiter has dropped its own copy
// kept for outages). Like penaltyRouter, it holds the breakers, not the
// Transport.
func liftRouter(profiles []profile, log *slog.Logger) func(group, scope string) {
	byName := profilesByName(profiles)
	return func(group, scope string) {
		p := byName[group]
		if p == nil {
			return
		}
		p.lifts.lifted(scope)
		if p.breakers.Lift(scope) {
			log.Info("throttle: penalty lifted, scope called again", "provider", group, "scope", scope)
		}
	}
}
