package limiter

import (
	"context"
	"strings"
	"time"

	"github.com/quotaware/throttle/limiter/rule"
	"github.com/redis/go-redis/v9"
)

// Hooks for the external tests of this package.

// ReserveSHA, OneSHA, CancelSHA and PenalizeSHA identify the scripts'
// calls: reserve.lua's, one.lua's (one request of paced rules),
// cancel.lua's and penalize.lua's.
var (
	ReserveSHA  = reserveScript.sha.(string)
	OneSHA      = oneScript.sha.(string)
	CancelSHA   = cancelScript.sha.(string)
	PenalizeSHA = penalizeScript.sha.(string)
)

// LoadScripts loads every script of the limiter into c's Redis, so that a
// test's hooks see no NOSCRIPT fallback: a warm-up request loads only the
// script its own call takes (one.lua for one request of paced rules).
func LoadScripts(ctx context.Context, c redis.UniversalClient) error {
	for _, s := range []*script{reserveScript, oneScript, cancelScript, penalizeScript} {
		if err := c.ScriptLoad(ctx, s.source.(string)).Err(); err != nil {
			return err
		}
	}
	return nil
}

// SetOnQueued sets the function called each time a request joins a lane's
// queue; nil removes it.
func SetOnQueued(f func(group string)) {
	if f == nil {
		onQueued.Store(nil)
		return
	}
	onQueued.Store(&f)
}

// The pieces of the Shared limiter, for tests that exercise one alone.
type (
	Redis          = redisLimiter
	RedisOption    = redisOption
	Failover       = failover
	FailoverConfig = failoverConfig
	Registry       = registry
)

// NewFailover wraps primary; a zero Recover means switch back at the first
// good probe, as tests of other behaviour want.
func NewFailover(primary store, cfg FailoverConfig) *Failover {
	if cfg.Recover == 0 {
		cfg.Recover = -1
	}
	return newFailover(primary, cfg)
}

// StartRegistry starts a replica registry.
func StartRegistry(client redis.UniversalClient, prefix string, every time.Duration) *Registry {
	return startRegistry(client, prefix, every, nil)
}

// Close stops a registry, waiting for its last beat.
func (r *registry) Close() { r.close() }

// ProbeNow is what a "back" announcement does.
func (f *failover) ProbeNow() { f.probeNow() }

// Close waits for the failover's background writes.
func (f *failover) Close() { f.close() }

// RuleKey, PenaltyKey and EpochKey name a group's keys.
func (l *Redis) RuleKey(group, key string) string      { return l.ruleKey(group, key) }
func (l *Redis) PenaltyKey(group, scope string) string { return l.penaltyKey(group, scope) }
func (l *Redis) EpochKey(group string) string          { return redisKey(l.prefix, epochTag, group, "") }

// Channel is where announcements go.
func (l *Redis) Channel() string { return l.channel() }

// Redis is the Shared limiter's Redis limiter.
func (s *Shared) Redis() *Redis { return s.redis }

// Registry is the Shared limiter's registry (nil with a fixed share).
func (s *Shared) Registry() *Registry { return s.registry }

// WatchPenalties follows announcements as a Shared limiter does.
func (l *Redis) WatchPenalties(onPenalty func(group string, p Penalty), onBack func(), onRejected func(string)) (stop func()) {
	w := l.watch(watcherConfig{onPenalty: onPenalty, onBack: onBack, onRejected: onRejected})
	return w.stop
}

// WatchPenaltiesPinging is WatchPenalties pinging a quiet subscription
// after every, and waiting as long for the answer.
func (l *Redis) WatchPenaltiesPinging(every time.Duration, onPenalty func(group string, p Penalty)) (stop func()) {
	return l.watch(watcherConfig{onPenalty: onPenalty, pingEvery: every}).stop
}

// AnnounceBack tells the watchers that Redis answers again.
func (l *Redis) AnnounceBack(ctx context.Context) error { return l.announceBack(ctx) }

// WatchLifts follows lift announcements as a Shared limiter does.
func (l *Redis) WatchLifts(onLift func(group, scope string)) (stop func()) {
	return l.watch(watcherConfig{onLift: onLift}).stop
}

// NewRedis and its options build the Redis limiter alone, without the
// outage mode, registry and watch that Shared adds.
var (
	NewRedis          = newRedis
	WithPrefix        = withPrefix
	WithoutCoalescing = withoutCoalescing
)

// RuleInterval is a paced rule's emission interval.
func RuleInterval(r rule.Rule) time.Duration {
	return time.Duration(core(&r).IntervalUs) * time.Microsecond
}

// Down reports whether Redis is considered away.
func (s *Shared) Down() bool { return s.failover.Down() }

// Len reports how many keys the limiter holds, for leak checks.
func (m *Memory) Len() int { return m.size() }

// SetClock puts the replica's clock that penalty ends are read on (before
// any use).
func (s *Shared) SetClock(now func() time.Time) { s.redis.now = now }

// ReplicaID names the replica in its fault key.
func (s *Shared) ReplicaID() string { return s.faults.key[strings.LastIndexByte(s.faults.key, ':')+1:] }

// NewMemoryWithClock returns a Memory limiter reading now instead of
// time.Now, so tests can step through calendar boundaries.
func NewMemoryWithClock(now func() time.Time) *Memory {
	m := NewMemory()
	m.now = now
	return m
}

// MaxBatchBytes bounds the size of one coalesced call.
const MaxBatchBytes = maxBatchBytes

// LeanRequests counts the requests of a lean call from its packed numbers
// (lean.go); -1 if they do not decode.
func LeanRequests(pack []byte) int {
	nums, ok := unpackUints(pack)
	if !ok {
		return -1
	}
	n := 0
	for x := 0; x+4 <= len(nums); n++ {
		x += 4 + int(nums[x]) + 3*int(nums[x+1])
	}
	return n
}

// unpackUints reads a MessagePack array of unsigned integers, as
// appendArrayHead and appendUint write them.
func unpackUints(b []byte) ([]int64, bool) {
	if len(b) == 0 {
		return nil, false
	}
	var n int
	switch c := b[0]; {
	case c&0xf0 == 0x90:
		n, b = int(c&0x0f), b[1:]
	case c == 0xdc && len(b) >= 3:
		n, b = int(b[1])<<8|int(b[2]), b[3:]
	case c == 0xdd && len(b) >= 5:
		n, b = int(b[1])<<24|int(b[2])<<16|int(b[3])<<8|int(b[4]), b[5:]
	default:
		return nil, false
	}
	out := make([]int64, 0, n)
	for range n {
		if len(b) == 0 {
			return nil, false
		}
		if b[0] < 0x80 {
			out, b = append(out, int64(b[0])), b[1:]
			continue
		}
		if b[0] < 0xcc || b[0] > 0xcf {
			return nil, false
		}
		size := 1 << (b[0] - 0xcc) // 0xcc-0xcf: 1, 2, 4 or 8 bytes
		if len(b) < 1+size {
			return nil, false
		}
		var u uint64
		for _, c := range b[1 : 1+size] {
			u = u<<8 | uint64(c)
		}
		out, b = append(out, int64(u)), b[1+size:]
	}
	return out, len(b) == 0
}
