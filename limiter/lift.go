package limiter

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/quotaware/throttle/limiter/inspect"
	"github.com/quotaware/throttle/limiter/internal/rulecore"

	"github.com/redis/go-redis/v9"
)

// Lifting a penalty: for an operator to end a shared penalty that should not
// be there (a garbled answer, a test run against production). The penalty
// key goes, and the lift is announced on the penalties channel so that every
// watching replica closes its breaker for the scope at once.

// A lift leaves a mark beside the penalty key ("{prefix:group}:l:<scope>"),
// so that a replica that re-reads a penalty it knows (liftwatch.go) tells a
// lift from a loss of Redis's data: a key gone with its mark is lifted; a
// key gone without one went with the rest of the state (a restart without
// persistence, a FLUSHALL), and its breakers stay open, as design.md says
// they do after a lost state. The mark lives as long as the penalty would
// have, at least liftMarkMin and at most liftMarkMax.
const (
	liftMarkMin = 10 * time.Minute
	liftMarkMax = 32 * 24 * time.Hour
)

// markLiftLua, run where a lift removes KEYS[1] (a penalty key whose value
// was v, false when none), leaves the mark KEYS[2]. It is a function of
// the scripts that lift.
const markLiftLua = `
local function mark(v, key, now_ms, min_ms, max_ms)
  local ttl = min_ms
  local e = v and tonumber(string.match(v, '^(%d+)'))
  if e and e / 1000 - now_ms > ttl then ttl = math.floor(e / 1000 - now_ms) end
  if ttl > max_ms then ttl = max_ms end
  redis.call('SET', key, '1', 'PX', ttl)
end
`

// liftScript removes a penalty key and leaves its mark; it returns 1 when
// there was a key.
var liftScript = redis.NewScript(markLiftLua + `
local v = redis.call('GET', KEYS[1])
local t = redis.call('TIME')
mark(v, KEYS[2], tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), tonumber(ARGV[1]), tonumber(ARGV[2]))
return redis.call('DEL', KEYS[1])
`)

// liftMarkArgs are the mark's bounds, as the lift scripts take them (ms).
var liftMarkArgs = []any{liftMarkMin.Milliseconds(), liftMarkMax.Milliseconds()}

// liftKeys are the keys of a lift of scope's penalty: the penalty's and
// its mark's.
func (l *redisLimiter) liftKeys(group, scope string) []string {
	return []string{l.penaltyKey(group, scope), l.markKey(group, scope)}
}

// markKey is the key of the mark a lift of scope's penalty leaves.
func (l *redisLimiter) markKey(group, scope string) string {
	return redisKey(l.prefix, liftTag, group, scope)
}

// liftPrefix leads a lift announcement, "\x00lift\n<group>\n<scope>"; a
// penalty announcement always starts with a group name, never with a NUL.
const liftPrefix = "\x00lift\n"

// LiftPenalty ends the shared penalty on scope of group at once and tells
// every watching replica, which closes its breaker for the scope. It
// reports whether a penalty was recorded. The announcement goes even when
// none was, so that replicas still holding a breaker open from an earlier
// announcement close it too.
func (l *redisLimiter) LiftPenalty(ctx context.Context, group, scope string) (bool, error) {
	if err := checkGroup(group); err != nil {
		return false, fmt.Errorf("%w: group %v", ErrInvalidRequest, err)
	}
	if err := rulecore.CheckKey(scope); err != nil {
		return false, fmt.Errorf("%w: scope %v", ErrInvalidRequest, err)
	}
	n, err := liftScript.Run(ctx, l.client, l.liftKeys(group, scope), liftMarkArgs...).Int64()
	if err != nil {
		return false, unavailable("lift", err)
	}
	return n > 0, l.announceLift(ctx, group, scope)
}

// announceLift tells the watching replicas that the penalty on scope of
// group is over; its error wraps ErrNotAnnounced.
func (l *redisLimiter) announceLift(ctx context.Context, group, scope string) error {
	if err := l.client.Publish(ctx, l.channel(), liftPrefix+group+"\n"+scope).Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrNotAnnounced, unavailable("publish", err))
	}
	return nil
}

// ErrPenaltyChanged is wrapped by a *PenaltyChangedError.
var ErrPenaltyChanged = errors.New("limiter: the penalty changed since it was read")

// PenaltyChangedError is LiftPenaltyIf's refusal: the penalty in Redis is
// no longer the one seen, so nothing was removed and nothing announced.
type PenaltyChangedError struct {
	// Group and Scope name the penalty the lift was asked for.
	Group, Scope string
	// Now is the penalty in Redis now; nil when there is none any more.
	Now *inspect.PenaltyState
}

// Error implements error.
func (e *PenaltyChangedError) Error() string {
	if e.Now == nil {
		return fmt.Sprintf("%v: the penalty on %s of %s is gone", ErrPenaltyChanged, e.Scope, e.Group)
	}
	return fmt.Sprintf("%v: the penalty on %s of %s is now code %s until %s", ErrPenaltyChanged,
		e.Scope, e.Group, e.Now.Code, e.Now.Until.UTC().Format("2006-01-02 15:04:05.000000 MST"))
}

// Unwrap lets errors.Is and errors.As see the cause.
func (e *PenaltyChangedError) Unwrap() error { return ErrPenaltyChanged }

// liftIfScript deletes a penalty key only while it holds ARGV[1], the value
// the operator was shown ("" for none). A value that is over by Redis's
// clock (its end, µs before the first "|", not after TIME) or unreadable
// counts as none, as Inspect does not show it. It returns {1, value} when
// the key held what was shown (and is gone), {0, value} when it did not.
var liftIfScript = redis.NewScript(markLiftLua + `
local v = redis.call('GET', KEYS[1])
local shown = v
local t = redis.call('TIME')
if v then
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local e = tonumber(string.match(v, '^(%d+)|') or string.match(v, '^(%d+)$'))
  if e == nil or e <= now then shown = '' end
else
  shown = ''
end
if shown ~= ARGV[1] then return {0, shown} end
mark(v, KEYS[2], tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), tonumber(ARGV[2]), tonumber(ARGV[3]))
if v then redis.call('DEL', KEYS[1]) end
return {1, shown}
`)

// LiftPenaltyIf is LiftPenalty for an operator who was shown the penalty
// (seen, from Inspect; nil when none was shown): it removes the penalty
// only while it is still the one seen, atomically, and otherwise removes
// nothing, announces nothing and returns a *PenaltyChangedError, so that a
// penalty recorded while the operator read (a new IP ban) stays. It
// reports whether a penalty was removed.
func (l *redisLimiter) LiftPenaltyIf(ctx context.Context, group, scope string, seen *inspect.PenaltyState) (bool, error) {
	if err := checkGroup(group); err != nil {
		return false, fmt.Errorf("%w: group %v", ErrInvalidRequest, err)
	}
	if err := rulecore.CheckKey(scope); err != nil {
		return false, fmt.Errorf("%w: scope %v", ErrInvalidRequest, err)
	}
	want := ""
	if seen != nil {
		if seen.Value == "" {
			return false, fmt.Errorf("%w: seen penalty on %s has no Value (read it with Inspect)", ErrInvalidRequest, scope)
		}
		want = seen.Value
	}
	res, err := liftIfScript.Run(ctx, l.client, l.liftKeys(group, scope), append([]any{want}, liftMarkArgs...)...).Slice()
	if err != nil {
		return false, unavailable("lift", err)
	}
	if len(res) != 2 {
		return false, unavailable("lift", fmt.Errorf("unexpected reply %v", res))
	}
	matched, _ := res[0].(int64)
	now, _ := res[1].(string)
	if matched != 1 {
		e := &PenaltyChangedError{Group: group, Scope: scope}
		if p, ok := parsePenaltyValue(scope, now); ok && now != "" {
			p.Value = now
			e.Now = &p
		}
		return false, e
	}
	return now != "", l.announceLift(ctx, group, scope)
}

// parseLift reads a lift announcement.
func parseLift(s string) (group, scope string, ok bool) {
	rest, found := strings.CutPrefix(s, liftPrefix)
	if !found {
		return "", "", false
	}
	group, scope, ok = strings.Cut(rest, "\n")
	return group, scope, ok && checkGroup(group) == nil && rulecore.CheckKey(scope) == nil
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

// LiftPenaltyIf is LiftPenalty that removes the penalty only while it is
// the one seen (see redisLimiter.LiftPenaltyIf); the copies kept for
// outages go only when it does.
func (f *failover) LiftPenaltyIf(ctx context.Context, group, scope string, seen *inspect.PenaltyState) (bool, error) {
	p, ok := f.primary.(interface {
		LiftPenaltyIf(context.Context, string, string, *inspect.PenaltyState) (bool, error)
	})
	if !ok {
		return false, fmt.Errorf("%w: this limiter cannot compare a penalty before lifting it", ErrInvalidRequest)
	}
	removed, err := p.LiftPenaltyIf(ctx, group, scope, seen)
	if err == nil || errors.Is(err, ErrNotAnnounced) {
		f.forgetPenalty(group, scope)
	}
	return removed, err
}

// forgetPenalty drops the copies of a penalty kept for outages (the local
// one, and one waiting to be written to Redis), when it is lifted here; it
// reports whether there was one.
func (f *failover) forgetPenalty(group, scope string) bool {
	local := f.forgetLocalPenalty(group, scope)
	f.penMu.Lock()
	_, kept := f.penalties[penaltyID{group, scope}]
	delete(f.penalties, penaltyID{group, scope})
	f.penMu.Unlock()
	return local || kept
}

// forgetLocalPenalty drops the local copy of a penalty, kept for outages.
func (f *failover) forgetLocalPenalty(group, scope string) bool {
	local, _ := f.local.LiftPenalty(context.Background(), group, scope)
	return local
}

// LiftPenalty ends the shared penalty on scope of group at once, in Redis
// and in the copy kept for outages, and tells every watching replica; it
// reports whether a penalty was recorded.
func (s *Shared) LiftPenalty(ctx context.Context, group, scope string) (bool, error) {
	removed, err := s.failover.LiftPenalty(ctx, group, scope)
	s.watcher.lifted(group, scope)
	return removed, err
}

// LiftPenaltyIf ends the shared penalty on scope of group only while it is
// still the one seen (an inspect.PenaltyState from Inspect; nil when none was seen),
// and tells every watching replica. When the penalty changed in between it
// removes nothing, announces nothing and returns a *PenaltyChangedError
// (errors.Is ErrPenaltyChanged); when the key went but the announcement did
// not, the error wraps ErrNotAnnounced. It reports whether a penalty
// was removed.
func (s *Shared) LiftPenaltyIf(ctx context.Context, group, scope string, seen *inspect.PenaltyState) (bool, error) {
	removed, err := s.failover.LiftPenaltyIf(ctx, group, scope, seen)
	if removed {
		s.watcher.lifted(group, scope)
	}
	return removed, err
}
