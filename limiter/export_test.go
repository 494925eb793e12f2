package limiter

import (
	"context"
	"strings"
	"time"

	"github.com/quotaware/throttle/limiter/rule"
	"github.com/redis/go-redis/v9"
)

// Hooks for the external tests of this package.

// ReserveSHA and CancelSHA identify the scripts' calls.
var (
	ReserveSHA = reserveScript.sha.(string)
	CancelSHA  = cancelScript.sha.(string)
)

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
