package learnedhash

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle/providers"
)

// Bounds of a field a replica takes, since anyone who can write to the
// Redis can fill the hash: a field longer than MaxField is garbled (an API
// is a catalog template), and so is a window over 8 bytes or an app over
// 64; a limit lapsing more than MaxAhead from now is garbled too, dropped
// rather than kept for good.
const (
	MaxField = 512
	MaxAhead = 31 * 24 * time.Hour
)

// Key is the hash of a group's learned limits.
func Key(prefix, group string) string { return "{" + prefix + ":" + group + "}:learned" }

// Field and Value are a learned limit's field and value in the hash.
func Field(l providers.Learned) string {
	if l.App != "" {
		return l.Window + "@" + l.App + " " + l.API
	}
	return l.Window + " " + l.API
}

func Value(l providers.Learned) string {
	return strconv.Itoa(l.Limit) + ":" + strconv.FormatInt(l.Until.UnixMilli(), 10)
}

// Parse reads one field of the hash; a garbled one is refused (ok false)
// rather than trusted. It says nothing of lapse: see InForce.
func Parse(field, v string) (l providers.Learned, ok bool) {
	window, api, ok := strings.Cut(field, " ")
	window, app, withApp := strings.Cut(window, "@")
	limit, until, ok2 := strings.Cut(v, ":")
	if !ok || !ok2 || len(field) > MaxField || window == "" || len(window) > 8 || api == "" || withApp && (app == "" || len(app) > 64) {
		return providers.Learned{}, false
	}
	n, err := strconv.Atoi(limit)
	ms, err2 := strconv.ParseInt(until, 10, 64)
	if err != nil || err2 != nil || n <= 0 {
		return providers.Learned{}, false
	}
	return providers.Learned{API: api, App: app, Window: window, Limit: n, Until: time.UnixMilli(ms)}, true
}

// InForce reports whether a parsed limit applies at now: not lapsed, and
// not lapsing further ahead than any replica writes one.
func InForce(l providers.Learned, now time.Time) bool {
	return now.Before(l.Until) && !l.Until.After(now.Add(MaxAhead))
}

// Write stores l in the hash at key as the profiles apply limits, so that a
// replica that reads the hash later (one started since) takes what the
// fleet runs at: a limit of every app (Feishu's) replaces one still in
// force only when lower, since a profile only lowers while a limit holds;
// one app's quota reading (App set) replaces one only when it lapses no
// sooner, i.e. was read no earlier. The hash lives as long as its
// longest-lived field. It reports whether l was stored; a limit already
// lapsed at now is not.
func Write(ctx context.Context, rdb redis.Scripter, key string, l providers.Learned, now time.Time) (bool, error) {
	ttl := l.Until.Sub(now).Milliseconds()
	if ttl <= 0 {
		return false, nil
	}
	byReading := "0"
	if l.App != "" {
		byReading = "1"
	}
	n, err := writeScript.Run(ctx, rdb, []string{key}, Field(l), Value(l), now.UnixMilli(), byReading, ttl,
		now.Add(MaxAhead).UnixMilli()).Int()
	return n == 1, err
}

// writeScript: KEYS[1] the hash; ARGV: field, value, now (Unix ms), "1"
// for an app's reading (the later Until wins) or "0" (the lower limit in
// force wins), the value's time to live (ms), the latest end a replica
// takes (now + MaxAhead, Unix ms). A value held now that no replica takes
// (it does not parse, its limit is 0, it has lapsed or ends past MaxAhead:
// Parse and InForce) is replaced, so that a planted one cannot block the
// limits the fleet learns.
var writeScript = redis.NewScript(`local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur then
  local cl, cu = string.match(cur, '^(%d+):(%d+)$')
  local nl, nu = string.match(ARGV[2], '^(%d+):(%d+)$')
  if cl and nl and tonumber(cl) > 0 and tonumber(cu) > tonumber(ARGV[3]) and tonumber(cu) <= tonumber(ARGV[6]) then
    if ARGV[4] == '1' then
      if tonumber(nu) < tonumber(cu) then return 0 end
    elseif tonumber(cl) <= tonumber(nl) then
      return 0
    end
  end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
local ttl = tonumber(ARGV[5])
if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
return 1`)

// Read returns the fields of the hash at key, all of them (complete) while
// it holds at most max, else about max of them, in one call: anyone who can
// write to the Redis can fill the hash, and a replica reading a flooded one
// whole every round would hold all of it each time. A partial read takes
// the fields of the hash's first buckets, the same ones each round.
func Read(ctx context.Context, rdb redis.Scripter, key string, max int) (fields map[string]string, complete bool, err error) {
	v, err := readScript.Run(ctx, rdb, []string{key}, max).Slice()
	if err != nil {
		return nil, false, err
	}
	if len(v) != 2 {
		return nil, false, errors.New("learnedhash: Read: an answer of " + strconv.Itoa(len(v)) + " parts, want 2")
	}
	all, _ := v[1].([]any)
	fields = make(map[string]string, min(len(all)/2, max))
	for i := 0; i+1 < len(all) && len(fields) < max; i += 2 {
		f, _ := all[i].(string)
		val, _ := all[i+1].(string)
		fields[f] = val
	}
	n, _ := v[0].(int64)
	return fields, n == 1, nil
}

// readScript: KEYS[1] the hash; ARGV[1] the most fields read. Answers
// {1, every field and value} or {0, the fields and values of one HSCAN of
// about that many}.
var readScript = redis.NewScript(`if redis.call('HLEN', KEYS[1]) <= tonumber(ARGV[1]) then
  return {1, redis.call('HGETALL', KEYS[1])}
end
return {0, redis.call('HSCAN', KEYS[1], '0', 'COUNT', ARGV[1])[2]}`)
