package limiter

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle/limiter/internal/rulecore"
	"github.com/quotaware/throttle/limiter/rule"
)

// calendarUsedScript raises the count of a calendar rule's current window
// (on Redis's clock, like reserve.lua) to what a provider reported. KEYS[1]:
// the rule's hash; ARGV: three consecutive window starts (µs: the previous,
// the current and the next by the caller's clock when it asked the
// provider; -1 is the answer once Redis's clock is past them), the provider's count,
// the count the caller read before asking the provider (-1: none).
//
// The provider's count lags the calls in flight, so the new count is the
// provider's plus what was booked since the caller read, and never below
// what is booked. The first report of a window (its field "r<start>" is
// absent) is taken to include none of the calls booked before it: a call
// booked but not yet arrived would otherwise be counted by nobody, and
// another client's calls are first learned then; later reports correct
// only for the calls booked while they were asked. That is conservative on
// purpose: it never trips the provider's quota, at the cost of counting
// twice the calls booked between the window's start and its first report
// (WeChat's readings come every 15 minutes: those of the day's first
// quarter hour at most; a reconciliation turned on mid-day: the day's
// calls so far, once). It returns the count in
// force. The marker field is not a number, so readers of counts skip it.
var calendarUsedScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local f, next = ARGV[2], tonumber(ARGV[3])
if now < tonumber(ARGV[2]) then f, next = ARGV[1], tonumber(ARGV[2]) end
if now >= next then return -1 end
local v = redis.pcall('HGET', KEYS[1], f)
if type(v) == 'table' then redis.call('DEL', KEYS[1]); v = false end
local cur = v and string.find(v, '^%d+$') and tonumber(v) or 0
local used, seen = tonumber(ARGV[4]), tonumber(ARGV[5])
local want = used
if redis.call('HSETNX', KEYS[1], 'r' .. f, 1) == 1 then
  want = used + cur
elseif seen >= 0 and cur > seen then
  want = used + cur - seen
end
if want > cur then redis.call('HSET', KEYS[1], f, want) end
local ttl = math.floor((next - now) / 1000) + 1
if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
return math.max(want, cur)
`)

// SetCalendarUsed raises the count of the calendar rule r's window in force
// at asked, when the provider was asked, to used, a count the provider
// reported (WeChat's quota/get), plus what the fleet booked since it read
// seen (CalendarUsed, before asking the provider; negative: nothing is
// known of that). The window's first report is taken to include none of
// the calls booked before it. It never lowers the count and returns the
// count in force. A count that arrives once that window has ended (on
// Redis's clock) is ErrWindowEnded and changes nothing: a reading asked at
// 23:59:59.9 and applied at 00:00:00.1 started the new day at the old
// day's count, refusing the API for the day. A zero asked is now. Other
// rules are an ErrInvalidRequest.
func (s *Shared) SetCalendarUsed(ctx context.Context, group string, r rule.Rule, used, seen int64, asked time.Time) (int64, error) {
	c := core(&r)
	if c == nil || c.Kind != rulecore.Calendar || used < 0 {
		return 0, fmt.Errorf("%w: SetCalendarUsed needs a calendar rule and a count of at least 0", ErrInvalidRequest)
	}
	if err := checkGroup(group); err != nil {
		return 0, err
	}
	if asked.IsZero() {
		asked = time.Now()
	}
	b := c.Windows(asked)
	n, err := calendarUsedScript.Run(ctx, s.redis.client, []string{s.redis.ruleKey(group, r.Key())},
		strconv.FormatInt(b[0], 10), strconv.FormatInt(b[1], 10), strconv.FormatInt(b[2], 10),
		used, seen).Int64()
	if err != nil {
		return 0, unavailable("calendar", err)
	}
	if n < 0 {
		return 0, ErrWindowEnded
	}
	return n, nil
}
