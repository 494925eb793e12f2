package limiter

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/quotaware/throttle/limiter/inspect"
	"github.com/quotaware/throttle/limiter/internal/rulecore"
	"github.com/quotaware/throttle/limiter/rule"

	"github.com/redis/go-redis/v9"
)

// Defaults of a Shared limiter, in one place: a zero SharedConfig field
// stands for them (see resolve).
const (
	defaultPrefix  = "throttle"
	defaultTimeout = 250 * time.Millisecond
	defaultProbe   = time.Second
	defaultRecover = 5 * time.Second
	// maxSetting bounds Timeout, Probe and Recover.
	maxSetting = 24 * time.Hour
	// defaultBeat is how often a replica renews its presence in the
	// registry that counts the live replicas.
	defaultBeat = 2 * time.Second
)

// SharedConfig configures a Shared limiter. Zero fields take the defaults
// each field states: the zero SharedConfig is prefix "throttle", local
// limiting with 1/live replicas of each rule during an outage, a 250ms
// timeout per Redis call, a probe a second while Redis is away, and 5s of
// good probes before using it again.
type SharedConfig struct {
	// Prefix of every key and of the announcement channel (default
	// "throttle"); replicas with the same prefix share their limits.
	Prefix string
	// Mode is what happens while Redis does not answer.
	Mode OutageMode
	// Share is the fraction of each rule a replica may use on its own
	// during an outage, in (0, 1]; zero means 1 / the number of live
	// replicas, counted in a small registry in Redis. With OutageLocal a
	// replica joins the registry whatever its Share, so that replicas
	// counting the live ones count it too.
	Share float64
	// Timeout bounds each call to Redis on the request path (reserve,
	// cancel, penalise; default 250ms). Time a request spends queued
	// behind another call for the same rules does not count. The
	// operator's calls (LiftPenalty, LiftPenaltyIf, SetCalendarUsed,
	// Inspect, CalendarUsed) are bounded by their context alone, and the
	// client's own timeouts.
	Timeout time.Duration
	// Probe is how often a replica in an outage asks Redis again (default
	// 1s).
	Probe time.Duration
	// Recover is how long Redis must answer every probe before the
	// replica leaves its outage mode (default 5s), so that a Redis failing
	// on and off does not make it flap; it doubles, up to a minute (or
	// Recover when longer), while Redis keeps failing soon after coming
	// back.
	Recover time.Duration
	// NoCoalescing makes every Reserve its own script call. By default,
	// requests of one group that arrive while calls for the group are in
	// flight go together in the next call, whatever their rules
	// (BENCHMARKS.md shows what that buys); this is for measuring it.
	NoCoalescing bool
	// Logger logs events, at most once a minute per kind and group
	// (default slog.Default()).
	Logger *slog.Logger
}

// event is something a Shared limiter noticed; see Listener.Event.
type event struct {
	Kind   eventKind
	Group  string
	Detail string // what happened, for logs
}

type eventKind string

const (
	eventStateLost            eventKind = "state_lost"
	eventCorruptValue         eventKind = "corrupt_value"
	eventAnnouncementRejected eventKind = "announcement_rejected"
	eventEvictable            eventKind = "evictable"
	eventPenaltyLost          eventKind = "penalty_lost"
	eventPenaltyDropped       eventKind = "penalty_dropped"
)

// Shared is the limiter replicas share through Redis, with everything that
// comes with it: the outage mode (local limiting with this replica's share,
// refusing, or admitting), the registry of live replicas that sets the
// share, and the watch of penalty announcements. It owns their background
// goroutines until Close. Use it for the limits of a fleet, and Memory
// within one process.
type Shared struct {
	redis    *redisLimiter
	failover *failover
	registry *registry
	watcher  *watcher
	faults   *faults
	log      *logLimiter
	cfg      SharedConfig

	bg        sync.WaitGroup
	stop      chan struct{} // closed by Close
	bgMu      sync.Mutex    // orders background's Add before Close's Wait
	closed    bool          // guarded by bgMu: no background work after Close
	closeOnce sync.Once
	finished  chan struct{} // closed once the background work has ended

	// described holds, per calendar rule met, when to record it in the
	// catalogue again (unix nanos): once per window, for throttlectl.
	describedMu    sync.RWMutex
	described      map[stateKey]*description
	describedSwept time.Time // guarded by describedMu, as describedDue
	describedDue   int64     // the earliest window end the last sweep saw (unix nanos)

	listeners listeners // see Listen
}

// NewShared returns a Shared limiter on client (a single node, a cluster,
// a ring or a failover client) and starts its background work.
func NewShared(client redis.UniversalClient, cfg SharedConfig) (*Shared, error) {
	if cfg.Prefix == "" {
		cfg.Prefix = defaultPrefix
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = defaultTimeout
	}
	if cfg.Probe == 0 {
		cfg.Probe = defaultProbe
	}
	if cfg.Recover == 0 {
		cfg.Recover = defaultRecover
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"Timeout", cfg.Timeout}, {"Probe", cfg.Probe}, {"Recover", cfg.Recover}} {
		// Past a day, a setting is a mistake (a count of seconds read as
		// nanoseconds the other way round), and near MaxInt64 the
		// failover's sums overflowed: a Recover that doubled turned
		// negative and ended the hysteresis, a Probe made every request
		// probe.
		if d.v < 0 || d.v > maxSetting {
			return nil, fmt.Errorf("limiter: NewShared: %s must be within [0, %v] (0: the default), got %v", d.name, maxSetting, d.v)
		}
	}
	switch {
	case cfg.Mode < OutageLocal || cfg.Mode > OutageAdmit:
		return nil, fmt.Errorf("limiter: NewShared: Mode must be OutageLocal, OutageRefuse or OutageAdmit, got %d", int(cfg.Mode))
	case !(cfg.Share >= 0 && cfg.Share <= 1): // NaN too
		return nil, fmt.Errorf("limiter: NewShared: Share must be within (0, 1], or 0 for 1/live replicas; got %v", cfg.Share)
	}
	opts := []redisOption{withPrefix(cfg.Prefix)}
	if cfg.NoCoalescing {
		opts = append(opts, withoutCoalescing())
	}
	r, err := newRedis(client, opts...)
	if err != nil {
		return nil, err
	}
	s := &Shared{redis: r, cfg: cfg, log: newLogLimiter(cfg.Logger), described: make(map[stateKey]*description), stop: make(chan struct{}),
		finished: make(chan struct{})}
	r.timeout = cfg.Timeout
	r.report = s.report
	r.spawn = s.spawn
	fc := failoverConfig{
		Mode:    cfg.Mode,
		Probe:   cfg.Probe,
		Recover: cfg.Recover,
		OnSwitch: func(down bool, err error) {
			s.listeners.each(func(l *Listener) {
				if l.Switch != nil {
					l.Switch(down, err)
				}
			})
			if down && usesTLS(client) {
				s.background(func() { s.diagnoseTLS(client) })
			}
			if !down {
				// The replicas still on their own shares would add them to
				// the full rate this one now takes from Redis until their
				// next probe: tell them to ask at once.
				s.background(func() {
					ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
					s.published(r.announceBack(ctx))
					cancel()
				})
			}
		},
		OnPenaltyLost: func(group string, p Penalty) {
			s.report(event{Kind: eventPenaltyLost, Group: group, Detail: "too many penalties kept during the outage; scope " + p.Scope + " will not be written to Redis"})
		},
	}
	// Every replica that sends on its own during an outage registers, a
	// fixed Share too: the replicas that count the live ones must count it
	// (three replicas on a fixed Share of 0.25 and one on the registry
	// sent 1.7 times a rule during an outage when only the latter
	// registered).
	if cfg.Mode == OutageLocal {
		s.registry = startRegistry(client, cfg.Prefix, defaultBeat, func(key string) {
			s.report(event{Kind: eventCorruptValue, Detail: "the replica registry " + key + " held another type; it was replaced"})
		})
		fc.Share = s.registry.Share
	}
	if cfg.Share > 0 {
		share := cfg.Share
		fc.Share = func() float64 { return share }
	}
	s.failover = newFailover(r, fc)
	s.startAnnouncements(client, r)
	s.background(s.checkEviction)
	return s, nil
}

// startAnnouncements starts what carries news between replicas: the watch
// of the announcement channel (penalties, lifts, "Redis is back") and the
// record of this replica's SUBSCRIBE and PUBLISH faults for the operator.
func (s *Shared) startAnnouncements(client redis.UniversalClient, r *redisLimiter) {
	id := ""
	if s.registry != nil {
		id = s.registry.id
	} else {
		var b [8]byte
		_, _ = rand.Read(b[:])
		id = hex.EncodeToString(b[:])
	}
	s.faults = newFaults(client, s.cfg.Prefix, id, func(msg string, clear bool) {
		if clear {
			s.cfg.Logger.Info("throttle: " + msg)
			return
		}
		s.cfg.Logger.Warn("throttle: "+msg, "event", "announcement_fault")
	})
	s.background(func() { s.faults.run(s.stop) })
	r.onPublish = s.published
	s.watcher = r.watch(watcherConfig{
		onPenalty: func(group string, p Penalty) {
			s.listeners.each(func(l *Listener) {
				if l.Penalty != nil {
					l.Penalty(group, p)
				}
			})
		},
		onLift: func(group, scope string) {
			// The copy kept for outages goes; one still waiting to be
			// written stays: no operator saw it in Redis to lift it (and
			// a spoofed lift would otherwise drop it for good).
			s.failover.forgetLocalPenalty(group, scope)
			s.listeners.each(func(l *Listener) {
				if l.Lift != nil {
					l.Lift(group, scope)
				}
			})
		},
		onBack: s.failover.probeNow,
		onRejected: func(reason string) {
			s.report(event{Kind: eventAnnouncementRejected, Detail: reason})
		},
		onSubscribe: func(err error) { s.faults.set(faultSubscribe, err) },
	})
	r.onPenalty = s.watcher.remember
	r.onStale = func(group string, p Penalty) {
		s.listeners.each(func(l *Listener) {
			if l.Stale != nil {
				l.Stale(group, p)
			}
		})
	}
}

// Addr names the Redis servers the limiter's client dials ("host:port",
// comma-separated for a cluster or ring; "" when the client does not say):
// what its errors and the outage log name.
func (s *Shared) Addr() string { return s.redis.addr }

// MustNewShared is NewShared for use in one expression, panicking when cfg
// is invalid: a configuration error is a programming error found at
// start-up.
//
//	throttle.WithLimiter(limiter.MustNewShared(rdb, limiter.SharedConfig{Prefix: "billing"}))
func MustNewShared(client redis.UniversalClient, cfg SharedConfig) *Shared {
	s, err := NewShared(client, cfg)
	if err != nil {
		panic(err)
	}
	return s
}

// background runs f in a goroutine that Close waits for.
func (s *Shared) background(f func()) {
	s.bgMu.Lock()
	defer s.bgMu.Unlock()
	if s.closed {
		return
	}
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		f()
	}()
}

// spawn runs f on a goroutine of its own, which Close waits for unless it
// began once Close had: unlike background's work, f must run whatever
// (a give-back lets its lane's rules go when done).
func (s *Shared) spawn(f func()) {
	s.bgMu.Lock()
	tracked := !s.closed
	if tracked {
		s.bg.Add(1)
	}
	s.bgMu.Unlock()
	go func() {
		if tracked {
			defer s.bg.Done()
		}
		f()
	}()
}

// published records whether an announcement went out: Redis refusing
// PUBLISH (an ACL error) is a fault; Redis away is not.
func (s *Shared) published(err error) {
	var rerr redis.Error
	switch {
	case err == nil:
		s.faults.set(faultPublish, nil)
	case errors.As(err, &rerr):
		s.faults.set(faultPublish, rerr)
	case !errors.Is(err, ErrUnavailable):
		s.faults.set(faultPublish, err)
	}
}

// checkEviction reads maxmemory-policy, where the server allows CONFIG GET
// (managed services often do not), and reports a policy that can evict
// the limiter's keys.
func (s *Shared) checkEviction() {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout)
	defer cancel()
	policy, err := s.redis.client.ConfigGet(ctx, "maxmemory-policy").Result()
	if err != nil {
		return
	}
	if p := policy["maxmemory-policy"]; p != "" && p != "noeviction" {
		s.report(event{Kind: eventEvictable, Detail: "Redis maxmemory-policy is " + p +
			": under memory pressure it evicts the limiter's keys, and the limits break until the loss is noticed; use noeviction"})
	}
}

// report logs e (rate-limited) and passes it on.
func (s *Shared) report(e event) {
	s.log.log(e)
	s.listeners.event(e)
}

// Reserve implements Limiter.
func (s *Shared) Reserve(ctx context.Context, req Request) (Reservation, error) {
	for i := range req.Rules {
		if core(&req.Rules[i]).Kind == rulecore.Calendar {
			s.describe(req.Group, req.Rules[i])
		}
	}
	return s.failover.Reserve(ctx, req)
}

// Penalize implements Limiter. During an outage the penalty holds locally
// and is written to Redis (and announced) once Redis is back, unless it is
// over by then. A penalty of a reset's code on one of its scopes whose
// call went out before the reset (RecordReset, Penalty.Sent) is neither
// written nor kept: Penalize returns ErrStalePenalty, or, for one kept
// through an outage, Listener.Stale is told once Redis answers again.
func (s *Shared) Penalize(ctx context.Context, group string, p Penalty) error {
	return s.failover.Penalize(ctx, group, p)
}

// PenalizeStored is Penalize that also returns the value it stored in
// Redis, for LiftPenaltyIf to lift exactly this penalty later; "" when it
// stored none: the penalty was over, older than a reset of its quota, kept
// for an outage, or a penalty ending no earlier was there.
func (s *Shared) PenalizeStored(ctx context.Context, group string, p Penalty) (string, error) {
	return s.failover.PenalizeStored(ctx, group, p)
}

// CalendarUsed reads how much of each calendar rule's current window is
// used in Redis, for quota gauges.
func (s *Shared) CalendarUsed(ctx context.Context, group string, rules []rule.Rule) ([]int64, error) {
	return s.redis.CalendarUsed(ctx, group, rules)
}

// Inspect reads the limiter's state in Redis, for operators (what
// throttlectl status prints):
// the given groups, or every group under the prefix when none is given.
func (s *Shared) Inspect(ctx context.Context, groups ...string) (inspect.State, error) {
	return s.redis.Inspect(ctx, groups...)
}

// Penalties returns the penalties in force in Redis of the scopes of group
// named, each with the Value LiftPenaltyIf compares, in one round trip.
func (s *Shared) Penalties(ctx context.Context, group string, scopes []string) ([]inspect.PenaltyState, error) {
	return s.redis.Penalties(ctx, group, scopes)
}

// Close stops the background work (the registry beat, the announcement
// watch, writes of penalties kept during an outage) and waits for it, at
// most 2 s; see Shutdown. It does not close the Redis client.
// Requests may still be reserved afterwards; they get no announcements.
func (s *Shared) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), closeWait)
	defer cancel()
	return s.Shutdown(ctx)
}

// closeWait bounds Close: about a beat, the longest a healthy Redis makes
// the replica wait to leave the registry.
const closeWait = defaultBeat

// Shutdown stops the background work (the registry beat, the announcement
// watch, writes of penalties kept during an outage) and waits for it until
// ctx ends, whatever Redis does: each piece is told to stop at once, the
// replica's last beat (leaving the registry) gives up when ctx ends, and
// work still waiting on a Redis that does not answer is left to end by its
// own timeout (a call's timeout, or the client's read timeout when it
// ignores context deadlines). It then returns an error wrapping ctx's. A
// replica that could not leave the registry drops out of it three beats
// later. It does not close the Redis client; calling it again waits again.
func (s *Shared) Shutdown(ctx context.Context) error {
	s.closeOnce.Do(func() {
		s.bgMu.Lock()
		s.closed = true
		close(s.stop)
		s.bgMu.Unlock()
		// Every piece stops at once, so that a slow one does not hold back
		// the others' ends; then wait for them all.
		if s.registry != nil {
			s.registry.stopAsync(ctx)
		}
		s.watcher.stopAsync()
		s.failover.stopAsync()
		go func() {
			defer close(s.finished)
			if s.registry != nil {
				s.registry.close()
			}
			s.watcher.stop()
			s.failover.close()
			s.bg.Wait()
		}()
	})
	select {
	case <-s.finished:
		return nil
	case <-ctx.Done():
		select {
		case <-s.finished: // both ready: the work did end
			return nil
		default:
		}
		return fmt.Errorf("limiter: Shutdown: background work still waiting on Redis: %w", context.Cause(ctx))
	}
}

// logLimiter logs each kind of event at most once a minute per group, so a
// burst of spoofed messages or a corrupt key read by every request costs
// one line.
type logLimiter struct {
	logger *slog.Logger
	mu     sync.Mutex
	last   map[logID]time.Time
}

type logID struct {
	kind  eventKind
	group string
}

func newLogLimiter(l *slog.Logger) *logLimiter {
	return &logLimiter{logger: l, last: make(map[logID]time.Time)}
}

func (ll *logLimiter) log(e event) {
	now := time.Now()
	id := logID{e.Kind, e.Group}
	ll.mu.Lock()
	if t, ok := ll.last[id]; ok && now.Sub(t) < time.Minute {
		ll.mu.Unlock()
		return
	}
	if len(ll.last) >= 1024 {
		clear(ll.last)
	}
	ll.last[id] = now
	ll.mu.Unlock()
	ll.logger.Warn("throttle: "+e.Detail, "event", string(e.Kind), "group", e.Group)
}
