package throttle

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle/internal/learnedhash"
	"github.com/quotaware/throttle/providers"
)

// Limits learned from answers (providers.Learned): a Classify that reads a
// lower limit in an answer (Feishu's x-ogw-ratelimit-limit) returns it in
// the verdict. The replica that got it lowers the API's rule at once; it
// writes the limit to the group's hash in Redis (its format:
// internal/learnedhash; one app's limit is read from a quota endpoint,
// quota_check.go) before the penalty of the same answer, so that the other
// replicas, told of the penalty at once, read it while
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
	// flooded: the hash was once found over maxLearnedRead fields (warned
	// once).
	flooded *atomic.Bool
}

// maxLearnedFields bounds the fields of the learned hash, which anyone who
// can write to the Redis can fill, a replica holds at once (a garbled one,
// learnedhash.Parse, it takes not at all), so that a flooded hash costs
// each replica a bounded amount of memory (each field is kept in seen, and
// a preset keeps a route per API it lowers).
const maxLearnedFields = 1024

// maxLearnedRead bounds the fields read from the hash each round
// (learnedhash.Read): a flooded one is read in part, the same part each
// round, rather than whole.
const maxLearnedRead = 4 * maxLearnedFields

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

// shareLearned writes a learned limit for the other replicas, which read it
// within a round of their loop; one the hash holds a stricter (or, for an
// app's reading, newer) value of stays (learnedhash.Write).
func shareLearned(ctx context.Context, rdb redis.UniversalClient, prefix, group string, l providers.Learned) error {
	_, err := learnedhash.Write(ctx, rdb, learnedhash.Key(prefix, group), l, time.Now())
	return err
}

// readLearned applies the learned limits stored by every replica.
func (l *headroomLoop) readLearned() {
	if l.rdb == nil {
		return
	}
	for _, lr := range l.learners {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		all, complete, err := learnedhash.Read(ctx, l.rdb, learnedhash.Key(l.prefix, lr.name), maxLearnedRead)
		if err != nil {
			cancel()
			l.log.Debug("throttle: could not read the learned limits", "provider", lr.name, "error", err)
			continue
		}
		now := time.Now()
		var lapsed []string
		lr.mu.Lock()
		// What was deleted from the hash is forgotten: known only from a
		// whole read.
		for field := range lr.seen {
			if _, ok := all[field]; !ok && complete {
				delete(lr.seen, field)
			}
		}
		if !complete && lr.flooded.CompareAndSwap(false, true) {
			l.log.Warn("throttle: the learned limits' hash holds more fields than any fleet writes; reading part of it each round",
				"provider", lr.name, "read", len(all))
		}
		for field, v := range all {
			learned, ok := learnedhash.Parse(field, v)
			if !ok || !learnedhash.InForce(learned, now) {
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
			dropLapsed(ctx, l.rdb, learnedhash.Key(l.prefix, lr.name), lapsed)
		}
		cancel()
	}
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
