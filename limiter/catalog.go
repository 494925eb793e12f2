package limiter

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/quotaware/throttle/limiter/internal/rulecore"
	"github.com/quotaware/throttle/limiter/rule"
	"github.com/redis/go-redis/v9"
)

// The catalogue: a Redis hash per group, "{prefix:group}:rules", that maps a
// calendar rule's key to its description (limit, unit, location, grace). The
// state keys hold counts only; the catalogue lets a reader that has no rules
// of its own (the throttlectl tool) say "4,212 / 5,000 used, resets on the
// 1st". Shared writes it when it first meets a calendar rule in a window. It lives as long as the calendar keys it describes: until the end
// of the latest window described, so an idle group leaves nothing behind
// that its calendar keys do not.

// describeScript sets the descriptions and extends (never shortens) the
// catalogue's life. KEYS[1]: the catalogue; ARGV[1]: time to live (ms);
// then field, value pairs.
var describeScript = redis.NewScript(`
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
local ttl = tonumber(ARGV[1])
if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
return 1`)

func (l *redisLimiter) catalogKey(group string) string {
	return "{" + l.prefix + ":" + group + "}:rules"
}

// Describe records calendar rules of group in the catalogue, so that
// Inspect can report their limits and window ends; other rules are skipped.
// It costs one round trip: Shared calls it once per rule and window.
func (l *redisLimiter) Describe(ctx context.Context, group string, rules ...rule.Rule) error {
	if err := checkGroup(group); err != nil {
		return err
	}
	now := time.Now()
	args := []any{int64(0)}
	var ttl time.Duration
	for i := range rules {
		if d := describeRule(core(&rules[i])); d != "" {
			args = append(args, rules[i].Key(), d)
			ttl = max(ttl, core(&rules[i]).WindowEnd(now).Sub(now)+time.Second)
		}
	}
	if len(args) == 1 {
		return nil
	}
	args[0] = ttl.Milliseconds()
	if err := describeScript.Run(ctx, l.client, []string{l.catalogKey(group)}, args...).Err(); err != nil {
		return unavailable("describe", err)
	}
	return nil
}

// describeRule writes a calendar rule as "calendar <limit> <unit> <location>
// <UTC offset s> <grace µs>"; "" for other rules. The offset stands in for a
// location the reader's zone database lacks (or a fixed zone).
func describeRule(r *rulecore.Rule) string {
	if r.Kind != rulecore.Calendar || r.Loc == nil {
		return ""
	}
	_, offset := time.Now().In(r.Loc).Zone()
	return "calendar " + strconv.FormatInt(r.Limit, 10) + " " + r.Unit.String() + " " +
		strings.ReplaceAll(r.Loc.String(), " ", "_") + " " + strconv.Itoa(offset) + " " +
		strconv.FormatInt(r.Grace.Microseconds(), 10)
}

// parseRuleDescription rebuilds a calendar rule from its description.
func parseRuleDescription(key, d string) (rule.Rule, bool) {
	f := strings.Fields(d)
	if len(f) != 6 || f[0] != "calendar" {
		return rule.Rule{}, false
	}
	limit, err1 := strconv.Atoi(f[1])
	offset, err2 := strconv.Atoi(f[4])
	grace, err3 := strconv.ParseInt(f[5], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return rule.Rule{}, false
	}
	loc, err := time.LoadLocation(f[3])
	if err != nil {
		loc = time.FixedZone(f[3], offset)
	}
	var unit rule.Unit
	for u := rule.Minute; u <= rule.Month; u++ {
		if u.String() == f[2] {
			unit = u
		}
	}
	r, err := rule.NewCalendar(key, limit, unit, loc, rule.WithGrace(time.Duration(grace)*time.Microsecond))
	return r, err == nil
}

// maxDescribed bounds the calendar rules a Shared limiter keeps track of
// describing (about 6 MB when full); rules met beyond it are not described
// (throttlectl then shows their counts without the limit) until rules whose
// window has ended make room. It was 4,096 with no room ever made: an ISV
// in 100,000 orgs had the first 4,096 described, for good.
const maxDescribed = 65536

// description is when a calendar rule is next to be recorded in the
// catalogue, and the limit it was recorded with.
type description struct{ next, limit atomic.Int64 }

// describe records a calendar rule in the catalogue (see catalog.go) when
// it is first met in a window, or met with another limit (one reconciled
// with the provider's count), off the request path, so that throttlectl
// can show its limit and window end. A failure only leaves the limit out
// until the next window.
func (s *Shared) describe(group string, rl rule.Rule) {
	r := core(&rl)
	k := stateKey{group, r.Key}
	s.describedMu.RLock()
	next := s.described[k]
	s.describedMu.RUnlock()
	if next == nil {
		s.describedMu.Lock()
		if next = s.described[k]; next == nil && len(s.described) >= maxDescribed {
			s.forgetDescribed(time.Now())
		}
		if next == nil && len(s.described) < maxDescribed {
			next = new(description)
			s.described[k] = next
		}
		s.describedMu.Unlock()
		if next == nil {
			return
		}
	}
	now := time.Now()
	at := next.next.Load()
	if (now.UnixNano() < at && next.limit.Load() == r.Limit) || !next.next.CompareAndSwap(at, r.WindowEnd(now).UnixNano()) {
		return // described in this window with this limit, or another request does it
	}
	next.limit.Store(r.Limit)
	s.background(func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout)
		defer cancel()
		_ = s.redis.Describe(ctx, group, rl)
	})
}

// forgetDescribed drops the rules whose window ended before now: met
// again, they are described in their new window as if new. A sweep walks
// every rule under the lock (1-5 ms at 65,536), so it runs at most once a
// minute, and only once the earliest window end it last saw has passed
// (rules met since may end sooner: an hour is the longest it waits). Its
// caller holds describedMu.
func (s *Shared) forgetDescribed(now time.Time) {
	if now.Before(s.describedSwept.Add(time.Minute)) ||
		now.UnixNano() < s.describedDue && now.Before(s.describedSwept.Add(time.Hour)) {
		return
	}
	s.describedSwept, s.describedDue = now, 0
	for k, d := range s.described {
		switch end := d.next.Load(); {
		case end <= now.UnixNano():
			delete(s.described, k)
		case s.describedDue == 0 || end < s.describedDue:
			s.describedDue = end
		}
	}
}
