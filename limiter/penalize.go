package limiter

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Writing a penalty to Redis (penalize.lua): the end moved onto Redis's
// clock, a penalty older than a reset of its quota dropped, and the news
// published to every replica.

// Penalize implements Limiter. The end goes to Redis with this replica's
// clock, and penalize.lua moves it onto Redis's when they differ by more
// than a call's latency, so a replica whose clock is off neither loses a
// short penalty (its end already past on Redis's clock) nor lengthens it
// for the fleet. A penalty over already is not written, and reported; one
// older than a reset of its quota (RecordReset) is not written either and
// returns ErrStalePenalty. One recorded but not announced (PUBLISH refused)
// returns an error wrapping ErrNotAnnounced, not ErrUnavailable.
func (l *redisLimiter) Penalize(ctx context.Context, group string, p Penalty) error {
	_, err := l.penalizeStored(ctx, group, p)
	return err
}

// penalizeStored is Penalize that also returns the value it stored in
// Redis, "" when it stored none (see StoredPenalizer).
func (l *redisLimiter) penalizeStored(ctx context.Context, group string, p Penalty) (string, error) {
	if err := p.validate(group); err != nil {
		return "", err
	}
	now := l.now()
	if !p.Until.After(now) && !p.Stated {
		// A stated end is the provider's instant: past on this replica's
		// clock (ahead of Redis's) it may not be on Redis's, which
		// penalize.lua decides.
		if l.report != nil {
			l.report(event{Kind: eventPenaltyDropped, Group: group,
				Detail: "a penalty on scope " + p.Scope + " was over before it could be written to Redis; it was not shared"})
		}
		return "", nil
	}
	a := argsPool.Get().(*scriptArgs)
	defer a.release()
	sent := now.UnixMicro()
	if p.Stated {
		sent = 0 // kept as stated: no skew to correct
	}
	ago := int64(-1) // unknown
	if !p.Sent.IsZero() {
		ago = max(0, time.Since(p.Sent).Microseconds())
	}
	a.begin(penalizeScript, 3)
	a.list = append(a.list, l.keys.get(l.prefix, penaltyTag, group, p.Scope), l.markKey(group, p.Scope), l.resetsKey(group),
		boxInt64(p.Until.UnixMicro()), p.Code, l.channel(), penaltyHeader(group, p.Scope), boxInt64(sent), boxInt64(ago), p.Scope)
	v, err := l.run(ctx, penalizeScript, a.list).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return "", unavailable("penalize", l.callError(ctx, err))
	}
	if n, ok := v.(int64); ok && n == -2 {
		if l.onStale != nil {
			l.onStale(group, p)
		}
		if l.report != nil {
			l.report(event{Kind: eventPenaltyDropped, Group: group,
				Detail: "a penalty on scope " + p.Scope + " (code " + p.Code + ") answered a call sent before the provider reset that quota; it was not shared"})
		}
		return "", ErrStalePenalty
	}
	if n, ok := v.(int64); ok && n < 0 {
		if l.report != nil {
			l.report(event{Kind: eventPenaltyDropped, Group: group,
				Detail: "a penalty on scope " + p.Scope + " was over on Redis's clock when written; it was not shared"})
		}
		return "", nil
	}
	// 0: a penalty ending no earlier is there, nothing of this one stored;
	// else {1 or "unannounced <error>", the value stored}.
	var stored string
	var perr error
	if n, ok := v.(int64); !ok || n != 0 {
		reply, ok := v.([]any)
		if !ok || len(reply) != 2 {
			return "", unavailable("penalize", fmt.Errorf("unexpected reply %v", v))
		}
		stored, _ = reply[1].(string)
		if s, ok := reply[0].(string); ok {
			msg, _ := strings.CutPrefix(s, "unannounced ")
			perr = errors.New(msg)
		}
	}
	if l.onPenalty != nil {
		l.onPenalty(group, p)
	}
	if l.onPublish != nil {
		l.onPublish(perr)
	}
	if perr != nil {
		return stored, fmt.Errorf("%w: PUBLISH refused: %w", ErrNotAnnounced, perr)
	}
	return stored, nil
}
