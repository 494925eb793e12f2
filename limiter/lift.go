package limiter

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Lifting a penalty: for an operator to end a shared penalty that should not
// be there (a garbled answer, a test run against production). The penalty
// key goes, and the lift is announced on the penalties channel so that every
// watching replica closes its breaker for the scope at once.

// liftPrefix leads a lift announcement, "\x00lift\n<group>\n<scope>"; a
// penalty announcement always starts with a group name, never with a NUL.
const liftPrefix = "\x00lift\n"

// WatchOption adds a handler to WatchPenalties.
type WatchOption interface{ applyWatch(*watchConfig) }

type watchConfig struct {
	onLift func(group, scope string)
}

type watchOptionFunc func(*watchConfig)

func (f watchOptionFunc) applyWatch(c *watchConfig) { f(c) }

// OnLift makes WatchPenalties call fn when a penalty is lifted (see
// LiftPenalty), once Redis confirms that the scope's penalty key is gone: a
// forged lift cannot end a penalty that is still recorded.
func OnLift(fn func(group, scope string)) WatchOption {
	return watchOptionFunc(func(c *watchConfig) { c.onLift = fn })
}

func watchConfigOf(opts []WatchOption) watchConfig {
	var c watchConfig
	for _, o := range opts {
		if o != nil {
			o.applyWatch(&c)
		}
	}
	return c
}

// LiftPenalty ends the shared penalty on scope of group at once and tells
// every watching replica, which closes its breaker for the scope. It
// reports whether a penalty was recorded. The announcement goes even when
// none was, so that replicas still holding a breaker open from an earlier
// announcement close it too.
func (l *Redis) LiftPenalty(ctx context.Context, group, scope string) (bool, error) {
	if err := checkKey("group", group); err != nil {
		return false, fmt.Errorf("%w: group %v", ErrInvalidRequest, err)
	}
	if err := checkKey("scope", scope); err != nil {
		return false, fmt.Errorf("%w: scope %v", ErrInvalidRequest, err)
	}
	n, err := l.client.Del(ctx, l.PenaltyKey(group, scope)).Result()
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
	return group, scope, ok && checkKey("group", group) == nil && checkKey("scope", scope) == nil
}

// handleLift confirms an announced lift against Redis (the penalty key must
// be gone) before telling onLift.
func (l *Redis) handleLift(c *watchConfig, payload string) {
	group, scope, ok := parseLift(payload)
	if !ok || c.onLift == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if n, err := l.client.Exists(ctx, l.PenaltyKey(group, scope)).Result(); err != nil || n != 0 {
		return
	}
	c.onLift(group, scope)
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
func (f *Failover) LiftPenalty(ctx context.Context, group, scope string) (bool, error) {
	local, _ := f.local.LiftPenalty(ctx, group, scope)
	p, ok := f.primary.(interface {
		LiftPenalty(context.Context, string, string) (bool, error)
	})
	if !ok {
		return local, nil
	}
	shared, err := p.LiftPenalty(ctx, group, scope)
	return local || shared, err
}

// ForgetPenalty drops the copy of a penalty kept for outages, when another
// replica has lifted it.
func (f *Failover) ForgetPenalty(group, scope string) {
	_, _ = f.local.LiftPenalty(context.Background(), group, scope)
}
