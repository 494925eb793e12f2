package throttle

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle/providers"
)

// Limits learned from answers (providers.Learned): a Classify that reads a
// lower limit in an answer (Feishu's x-ogw-ratelimit-limit) returns it in
// the verdict. The replica that got it lowers the API's rule at once; it
// writes the limit to the group's hash in Redis, field "<window> <API>"
// ("<window>@<app> <API>" for one app's limit, read from a quota endpoint:
// quota_check.go), value "<limit>:<until, Unix ms>", before the penalty of
// the same answer,
// so that the other replicas, told of the penalty at once, read it while
// the penalty holds and are lowered before the API is called again. Every
// round of the loop reads the hash again (a replica started later, a lost
// announcement) and drops the lapsed fields.

// learner is a profile that applies learned limits.
type learner struct {
	name    string
	lower   func(providers.Learned) bool
	lowered *atomic.Int64 // the profile's count of rules lowered
	// seen holds the stored values this Transport applied, by field: a new
	// one makes its waiting requests book again even when the profile,
	// shared with another Transport of the process, lowered its rule
	// already.
	mu   *sync.Mutex
	seen map[string]string
}

// maxLearned bounds how far ahead a stored learned limit may lapse: one
// further is garbled, and is dropped rather than kept for good.
const maxLearned = 31 * 24 * time.Hour

// Bounds of what a replica takes from the learned hash, which anyone who
// can write to the Redis can fill: a field longer than maxLearnedField is
// garbled (an API is a catalog template), and at most maxLearnedFields are
// held at once, so that a flooded hash costs each replica a bounded
// amount of memory (each field is kept in seen, and a preset keeps a route
// per API it lowers).
const (
	maxLearnedField  = 512
	maxLearnedFields = 1024
)

func learnedKey(prefix, group string) string { return "{" + prefix + ":" + group + "}:learned" }

// learn applies the verdict's learned limit to this replica, logs it, and
// returns the write that shares it (a no-op without one or without Redis).
func (c *call) learn() func(context.Context) {
	l := c.verdict.Learned
	if l == nil || c.p.Lower == nil || len(l.Window) > 8 || l.Limit <= 0 {
		return func(context.Context) {}
	}
	c.p.Lower(*l) // false when a Transport sharing the profile lowered it first
	c.p.lowered.Add(1)
	c.t.tel.log.Info("throttle: the provider stated a lower limit than the profile's; the API's rule is lowered on every replica",
		"provider", c.p.Name, "api", l.API, "window", l.Window, "limit", l.Limit, "until", l.Until)
	loop, name, learned := c.t.head, c.p.Name, *l
	if loop == nil || loop.rdb == nil {
		return func(context.Context) {}
	}
	return func(ctx context.Context) {
		if err := shareLearned(ctx, loop.rdb, loop.prefix, name, learned); err != nil {
			loop.log.Warn("throttle: could not share a learned limit", "provider", name, "api", learned.API, "error", err)
		}
	}
}

// learnedField and learnedValue are a learned limit's field and value in
// the group's hash.
func learnedField(l providers.Learned) string {
	if l.App != "" {
		return l.Window + "@" + l.App + " " + l.API
	}
	return l.Window + " " + l.API
}

func learnedValue(l providers.Learned) string {
	return strconv.Itoa(l.Limit) + ":" + strconv.FormatInt(l.Until.UnixMilli(), 10)
}

// shareLearned writes a learned limit for the other replicas, which read it
// within a round of their loop.
func shareLearned(ctx context.Context, rdb redis.UniversalClient, prefix, group string, l providers.Learned) error {
	key := learnedKey(prefix, group)
	pipe := rdb.TxPipeline()
	pipe.HSet(ctx, key, learnedField(l), learnedValue(l))
	pipe.PExpire(ctx, key, time.Until(l.Until))
	_, err := pipe.Exec(ctx)
	return err
}

// readLearned applies the learned limits stored by every replica.
func (l *headroomLoop) readLearned() {
	if l.rdb == nil {
		return
	}
	for _, lr := range l.learners {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		all, err := l.rdb.HGetAll(ctx, learnedKey(l.prefix, lr.name)).Result()
		if err != nil {
			cancel()
			l.log.Debug("throttle: could not read the learned limits", "provider", lr.name, "error", err)
			continue
		}
		now := time.Now()
		var lapsed []string
		lr.mu.Lock()
		// What was deleted from the hash is forgotten.
		for field := range lr.seen {
			if _, ok := all[field]; !ok {
				delete(lr.seen, field)
			}
		}
		for field, v := range all {
			learned, ok := parseLearned(field, v)
			if !ok || !now.Before(learned.Until) || learned.Until.After(now.Add(maxLearned)) {
				lapsed = append(lapsed, field, v)
				continue
			}
			if lr.seen[field] == v {
				continue
			}
			if _, had := lr.seen[field]; !had && len(lr.seen) >= maxLearnedFields {
				continue // taken once others lapse or go
			}
			lr.seen[field] = v
			if lr.lower(learned) {
				if learned.App != "" {
					l.log.Info("throttle: a limit another replica read from the provider's quota endpoint applies", "provider", lr.name,
						"app", learned.App, "api", learned.API, "window", learned.Window, "limit", learned.Limit, "until", learned.Until)
				} else {
					l.log.Info("throttle: a lower limit learned by another replica lowers the API's rule", "provider", lr.name,
						"api", learned.API, "window", learned.Window, "limit", learned.Limit, "until", learned.Until)
				}
			}
			lr.lowered.Add(1)
		}
		for i := 0; i < len(lapsed); i += 2 {
			delete(lr.seen, lapsed[i])
		}
		lr.mu.Unlock()
		if len(lapsed) > 0 {
			dropLapsed(ctx, l.rdb, learnedKey(l.prefix, lr.name), lapsed)
		}
		cancel()
	}
}

// parseLearned reads one field of the learned hash; a garbled one is
// dropped rather than trusted.
func parseLearned(field, v string) (providers.Learned, bool) {
	window, api, ok := strings.Cut(field, " ")
	window, app, withApp := strings.Cut(window, "@")
	limit, until, ok2 := strings.Cut(v, ":")
	if !ok || !ok2 || len(field) > maxLearnedField || window == "" || len(window) > 8 || api == "" || withApp && (app == "" || len(app) > 64) {
		return providers.Learned{}, false
	}
	n, err := strconv.Atoi(limit)
	ms, err2 := strconv.ParseInt(until, 10, 64)
	if err != nil || err2 != nil || n <= 0 {
		return providers.Learned{}, false
	}
	return providers.Learned{API: api, App: app, Window: window, Limit: n, Until: time.UnixMilli(ms)}, true
}

// dropLapsed deletes the lapsed fields of the learned hash at key, given as
// field, value pairs, each only while it still holds the value read: a
// field another replica rewrote since (a limit learned again) stays.
func dropLapsed(ctx context.Context, rdb redis.UniversalClient, key string, pairs []string) {
	args := make([]any, len(pairs))
	for i, p := range pairs {
		args[i] = p
	}
	dropLapsedScript.Run(ctx, rdb, []string{key}, args...)
}

var dropLapsedScript = redis.NewScript(`local n = 0
for i = 1, #ARGV, 2 do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[i + 1] then n = n + redis.call('HDEL', KEYS[1], ARGV[i]) end
end
return n`)
