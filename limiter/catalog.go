package limiter

import (
	"context"
	"strconv"
	"strings"
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
