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
// the count the caller read before asking the provider (-1: none), when
// the caller asked (µs, moved onto Redis's clock by the replica's known
// skew; a count asked within a second of a clear, by that reckoning, is
// taken as asked before it).
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
local cleared = tonumber(redis.call('HGET', KEYS[1], 'c' .. f))
if cleared and tonumber(ARGV[6]) < cleared + 1000000 then return cur end
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
// count in force. A count asked before the window was cleared
// (ClearCalendar) is the one the provider's reset ended, and changes
// nothing. A count that arrives once that window has ended (on
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
		used, seen, asked.UnixMicro()+s.failover.skew.Load()).Int64()
	if err != nil {
		return 0, unavailable("calendar", err)
	}
	if n < 0 {
		return 0, ErrWindowEnded
	}
	return n, nil
}

// clearCalendarScript starts the window in force of each calendar rule
// again from zero (on Redis's clock, like reserve.lua), for a provider that
// has reset its own count (WeChat's clear_quota). KEYS: the rules' hashes;
// ARGV: four window starts per key (µs: the previous, the current, the next
// and the one after, by the caller's clock). The count goes and the
// window's field "c<start>" records when (µs, Redis's clock):
// calendarUsedScript ignores a provider's count asked before it, which
// would put back the count the reset ended. The reconciliation marker
// stays, so the next reading is not taken as the window's first.
// A cancel of a call booked before the clear takes nothing from the
// window's new count (cancel.lua). It returns how many counts it removed.
var clearCalendarScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local n = 0
for i = 1, #KEYS do
  local j = (i - 1) * 4
  local w = 2
  if now < tonumber(ARGV[j + 2]) then w = 1 elseif now >= tonumber(ARGV[j + 3]) then w = 3 end
  local f, k = ARGV[j + w], KEYS[i]
  if redis.pcall('HDEL', k, f) == 1 then n = n + 1 end
  if type(redis.pcall('HSET', k, 'c' .. f, now)) == 'number' then
    local ttl = math.floor((tonumber(ARGV[j + w + 1]) - now) / 1000) + 1
    if redis.call('PTTL', k) < ttl then redis.call('PEXPIRE', k, ttl) end
  end
end
return n
`)

// ClearCalendar starts the current window of each calendar rule of group
// again from zero, on every replica, for a provider that has just reset
// its own count (WeChat's clear_quota): without it, a quota the provider
// cleared at noon stays spent here until midnight. The copy kept for
// outages is cleared too. Rules other than calendar rules are an
// ErrInvalidRequest, and so is a call without rules.
func (s *Shared) ClearCalendar(ctx context.Context, group string, rules []rule.Rule) error {
	if err := checkClear(group, rules); err != nil {
		return err
	}
	now := time.Now()
	keys, args := make([]string, len(rules)), make([]any, 0, 4*len(rules))
	for i := range rules {
		keys[i] = s.redis.ruleKey(group, rules[i].Key())
		for _, w := range core(&rules[i]).Windows(now) {
			args = append(args, strconv.FormatInt(w, 10))
		}
	}
	_ = s.failover.local.ClearCalendar(ctx, group, rules)
	if err := clearCalendarScript.Run(ctx, s.redis.client, keys, args...).Err(); err != nil {
		return unavailable("calendar", err)
	}
	return nil
}

// ClearCalendar is the Memory limiter's counterpart of Shared.ClearCalendar.
func (m *Memory) ClearCalendar(_ context.Context, group string, rules []rule.Rule) error {
	if err := checkClear(group, rules); err != nil {
		return err
	}
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range rules {
		if st := m.calendar[stateKey{group, rules[i].Key()}]; st != nil {
			w := core(&rules[i]).Windows(now)[1]
			delete(st.counts, w)
			if st.cleared == nil {
				st.cleared = make(map[int64]int64, 1)
			}
			st.cleared[w] = now.UnixMicro()
		}
	}
	return nil
}

// checkClear checks a ClearCalendar call.
func checkClear(group string, rules []rule.Rule) error {
	if err := checkGroup(group); err != nil {
		return err
	}
	if len(rules) == 0 {
		return fmt.Errorf("%w: ClearCalendar needs at least one rule", ErrInvalidRequest)
	}
	for i := range rules {
		if c := core(&rules[i]); c == nil || c.Kind != rulecore.Calendar {
			return fmt.Errorf("%w: ClearCalendar needs calendar rules (rule %d is not one)", ErrInvalidRequest, i)
		}
	}
	return nil
}
