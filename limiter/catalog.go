package limiter

import (
	"context"
	"strconv"
	"strings"
	"time"
)

// The catalogue: a Redis hash per group, "{prefix:group}:rules", that maps a
// calendar rule's key to its description (limit, unit, location, grace). The
// state keys hold counts only; the catalogue lets a reader that has no rules
// of its own (the throttlectl tool) say "4,212 / 5,000 used, resets on the
// 1st". Transports write it when they first meet a calendar rule.

// catalogTTL keeps the catalogue past the longest calendar window; writers
// renew it.
const catalogTTL = 40 * 24 * time.Hour

func (l *Redis) catalogKey(group string) string {
	return "{" + l.prefix + ":" + group + "}:rules"
}

// Describe records calendar rules of group in the catalogue, so that
// Inspect can report their limits and window ends; other rules are skipped.
// It costs one round trip; call it once per rule, not per request.
func (l *Redis) Describe(ctx context.Context, group string, rules ...Rule) error {
	if err := checkKey("group", group); err != nil {
		return err
	}
	var fields []any
	for i := range rules {
		if d := describeRule(rules[i]); d != "" {
			fields = append(fields, rules[i].key, d)
		}
	}
	if len(fields) == 0 {
		return nil
	}
	key := l.catalogKey(group)
	pipe := l.client.TxPipeline()
	pipe.HSet(ctx, key, fields...)
	pipe.PExpire(ctx, key, catalogTTL)
	if _, err := pipe.Exec(ctx); err != nil {
		return unavailable("describe", err)
	}
	return nil
}

// describeRule writes a calendar rule as "calendar <limit> <unit> <location>
// <UTC offset s> <grace µs>"; "" for other rules. The offset stands in for a
// location the reader's zone database lacks (or a fixed zone).
func describeRule(r Rule) string {
	if r.kind != calendarRule || r.loc == nil {
		return ""
	}
	_, offset := time.Now().In(r.loc).Zone()
	return "calendar " + strconv.FormatInt(r.limit, 10) + " " + r.unit.String() + " " +
		strings.ReplaceAll(r.loc.String(), " ", "_") + " " + strconv.Itoa(offset) + " " +
		strconv.FormatInt(r.grace.Microseconds(), 10)
}

// parseRuleDescription rebuilds a calendar rule from its description.
func parseRuleDescription(key, d string) (Rule, bool) {
	f := strings.Fields(d)
	if len(f) != 6 || f[0] != "calendar" {
		return Rule{}, false
	}
	limit, err1 := strconv.Atoi(f[1])
	offset, err2 := strconv.Atoi(f[4])
	grace, err3 := strconv.ParseInt(f[5], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return Rule{}, false
	}
	loc, err := time.LoadLocation(f[3])
	if err != nil {
		loc = time.FixedZone(f[3], offset)
	}
	var unit Unit
	for u := Minute; u <= Month; u++ {
		if u.String() == f[2] {
			unit = u
		}
	}
	r, err := NewCalendarRule(key, limit, unit, loc, WithGrace(time.Duration(grace)*time.Microsecond))
	return r, err == nil
}
