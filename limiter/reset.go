package limiter

import (
	"context"
	"fmt"
	"time"

	"github.com/quotaware/throttle/limiter/internal/rulecore"

	"github.com/redis/go-redis/v9"
)

// The provider's resets, for every replica: a hash per group,
// "{prefix:group}:resets", holding for each scope a reset ended the
// penalties of "<Redis µs of the reset>|<code>". penalize.lua reads the
// scope's field and drops a penalty of that code whose call was sent
// before it (ErrStalePenalty). A scope reset again keeps the latest.

// resetRecordLife is how long a group's record lives after its latest
// reset: longer than any answer stays in flight, and than most outages
// during which a replica keeps a penalty to write once Redis is back
// (failover_penalties.go); a day also covers the longest window a reset
// ends (WeChat's daily quotas).
const resetRecordLife = 24 * time.Hour

// maxResetScopes bounds the scopes of one RecordReset (a WeChat account's
// every API is a few hundred).
const maxResetScopes = 10000

// recordResetScript writes ARGV[3...] (scopes) to the hash KEYS[1], each
// with Redis's time and the code ARGV[1], and keeps the hash ARGV[2] ms.
// A key of another type is replaced (it returns 1 then, else 0): kept, it
// would fail every reset's record from then on.
var recordResetScript = redis.NewScript(`
local replaced = 0
local ty = redis.call('TYPE', KEYS[1]).ok
if ty ~= 'hash' and ty ~= 'none' then
  redis.call('DEL', KEYS[1])
  replaced = 1
end
local t = redis.call('TIME')
local v = t[1] .. string.format('%06d', tonumber(t[2])) .. '|' .. ARGV[1]
for i = 3, #ARGV do redis.call('HSET', KEYS[1], ARGV[i], v) end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return replaced
`)

// resetsKey is the key of group's record of the provider's resets.
func (l *redisLimiter) resetsKey(group string) string {
	return "{" + l.prefix + ":" + group + "}:resets"
}

// RecordReset implements ResetRecorder: from now on, every replica drops
// a penalty of code on one of scopes whose call was sent before now (by
// Redis's clock). Record a reset before lifting what it ended: an answer
// from before it that arrives in between is then dropped too.
func (s *Shared) RecordReset(ctx context.Context, group, code string, scopes []string) error {
	if err := checkGroup(group); err != nil {
		return fmt.Errorf("%w: group %v", ErrInvalidRequest, err)
	}
	switch {
	case code == "":
		return fmt.Errorf("%w: RecordReset: code must not be empty", ErrInvalidRequest)
	case len(code) > maxCodeLen:
		return fmt.Errorf("%w: RecordReset: code longer than %d bytes", ErrInvalidRequest, maxCodeLen)
	case len(scopes) > maxResetScopes:
		return fmt.Errorf("%w: RecordReset: %d scopes, at most %d", ErrInvalidRequest, len(scopes), maxResetScopes)
	}
	if len(scopes) == 0 {
		return nil
	}
	args := make([]any, 0, 2+len(scopes))
	args = append(args, code, resetRecordLife.Milliseconds())
	for _, sc := range scopes {
		if err := rulecore.CheckKey(sc); err != nil {
			return fmt.Errorf("%w: RecordReset: scope %v", ErrInvalidRequest, err)
		}
		args = append(args, sc)
	}
	key := s.redis.resetsKey(group)
	replaced, err := recordResetScript.Run(ctx, s.redis.client, []string{key}, args...).Int64()
	if err != nil {
		return unavailable("record reset", err)
	}
	if replaced == 1 {
		s.report(event{Kind: eventCorruptValue, Group: group, Detail: "the record of resets " + key + " held another type; it was replaced"})
	}
	return nil
}
