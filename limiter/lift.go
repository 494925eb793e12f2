package limiter

import (
	"context"
	"fmt"
	"strings"

	"github.com/quotaware/throttle/limiter/internal/rulecore"
)

// Lifting a penalty: for an operator to end a shared penalty that should not
// be there (a garbled answer, a test run against production). The penalty
// key goes, and the lift is announced on the penalties channel so that every
// watching replica closes its breaker for the scope at once.

// liftPrefix leads a lift announcement, "\x00lift\n<group>\n<scope>"; a
// penalty announcement always starts with a group name, never with a NUL.
const liftPrefix = "\x00lift\n"

// LiftPenalty ends the shared penalty on scope of group at once and tells
// every watching replica, which closes its breaker for the scope. It
// reports whether a penalty was recorded. The announcement goes even when
// none was, so that replicas still holding a breaker open from an earlier
// announcement close it too.
func (l *redisLimiter) LiftPenalty(ctx context.Context, group, scope string) (bool, error) {
	if err := rulecore.CheckKey(group); err != nil {
		return false, fmt.Errorf("%w: group %v", ErrInvalidRequest, err)
	}
	if err := rulecore.CheckKey(scope); err != nil {
		return false, fmt.Errorf("%w: scope %v", ErrInvalidRequest, err)
	}
	n, err := l.client.Del(ctx, l.penaltyKey(group, scope)).Result()
	if err != nil {
		return false, unavailable("lift", err)
	}
	if err := l.client.Publish(ctx, l.channel(), liftPrefix+group+"\n"+scope).Err(); err != nil {
		return n > 0, unavailable("publish", err)
	}
	return n > 0, nil
}

// parseLift reads a lift announcement.
func parseLift(s string) (group, scope string, ok bool) {
	rest, found := strings.CutPrefix(s, liftPrefix)
	if !found {
		return "", "", false
	}
	group, scope, ok = strings.Cut(rest, "\n")
	return group, scope, ok && rulecore.CheckKey(group) == nil && rulecore.CheckKey(scope) == nil
}

// LiftPenalty ends a penalty in the Memory limiter; it reports whether one
// was recorded.
func (m *Memory) LiftPenalty(_ context.Context, group, scope string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := stateKey{group, scope}
	_, ok := m.penalties[k]
	delete(m.penalties, k)
	return ok, nil
}

// LiftPenalty ends the penalty both in the copy kept for outages and in the
// primary, when the primary can lift (the Redis limiter can); it reports
// whether either held one.
func (f *failover) LiftPenalty(ctx context.Context, group, scope string) (bool, error) {
	local := f.forgetPenalty(group, scope)
	p, ok := f.primary.(interface {
		LiftPenalty(context.Context, string, string) (bool, error)
	})
	if !ok {
		return local, nil
	}
	shared, err := p.LiftPenalty(ctx, group, scope)
	return local || shared, err
}

// forgetPenalty drops the copies of a penalty kept for outages (the local
// one, and one waiting to be written to Redis), when it is lifted here or
// by another replica; it reports whether there was one.
func (f *failover) forgetPenalty(group, scope string) bool {
	local, _ := f.local.LiftPenalty(context.Background(), group, scope)
	f.penMu.Lock()
	_, kept := f.penalties[penaltyID{group, scope}]
	delete(f.penalties, penaltyID{group, scope})
	f.penMu.Unlock()
	return local || kept
}

// LiftPenalty ends the shared penalty on scope of group at once, in Redis
// and in the copy kept for outages, and tells every watching replica; it
// reports whether a penalty was recorded.
func (s *Shared) LiftPenalty(ctx context.Context, group, scope string) (bool, error) {
	return s.failover.LiftPenalty(ctx, group, scope)
}
