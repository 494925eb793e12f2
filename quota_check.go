package throttle

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle/internal/learnedhash"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/rule"
	"github.com/quotaware/throttle/providers"
)

// Quota reconciliation (providers.QuotaCheck, WeChat's Config.Reconcile):
// the profile names, for each request, the quota it counts against and the
// token it carries; the Transport keeps the latest token per quota in
// memory only (never logged, never in Redis) and, off the request path,
// reads each quota soon after its first use and then every QuotaCheck.Every.
//
// The token is the one the app's own requests carry rather than one of a
// token exchange of ours: a second WeChat /cgi-bin/token exchange
// invalidates the token every other replica and system holds, and the
// shared exchange's stored token is sealed under the app's secret, which
// the Transport never sees. An app that makes no call needs no reading.
//
// One replica of the fleet reads a quota per period: a lease in Redis
// ({prefix:group}:qc:<app> <API>, expiring after Every). The reading goes
// through the Transport itself, charged to the app, so the quota endpoint's
// own rules bound what the readings spend. The limit it states reaches
// every replica as a learned limit (learned.go: written to the group's
// learned hash, which each replica reads every second); the count is set in
// the limiter's own calendar key (limiter.Shared.SetCalendarUsed), which
// every replica books against.

// Bounds of the readings.
const (
	quotaReadTimeout = 10 * time.Second
	reconciledTTL    = 24 * time.Hour // a reconciled limit holds this long without a new reading
	quotaRetry       = time.Minute    // a failed reading is tried again this much later (at most Every)
	maxQuotaTargets  = 1024
)

type quotaTargetKey struct{ group, rule string }

// quotaEntry is one app's quota of one API.
type quotaEntry struct {
	key   quotaTargetKey
	p     *profile
	check *providers.QuotaCheck
	cur   atomic.Pointer[providers.QuotaTarget] // the latest token seen
	named atomic.Int64                          // when a request last named it (unix nanos)
	next  time.Time                             // the next reading; guarded by the checker's busy
	fails int                                   // failed readings in a row; guarded by busy
}

// idleReadings is how many periods (Every) a quota no request names is
// still read: an app that stopped calling needs no reading, and its last
// token expires (WeChat: 2 h), after which every reading failed, a WARN a
// minute, for as long as the process ran. A request naming it again
// brings it back, read at once.
const idleReadings = 2

// quotaChecker runs the readings of a Transport. It holds the Transport
// only weakly, so a dropped Transport can be collected, and stops with its
// background's context, which Close cancels.
type quotaChecker struct {
	tr     weak.Pointer[Transport]
	done   context.Context // the Transport's background context
	shared *limiter.Shared // nil: counts are not set
	rdb    redis.UniversalClient
	prefix string
	log    *slog.Logger
	head   *headroomLoop // its learners are told what this replica wrote

	targets sync.Map // quotaTargetKey -> *quotaEntry
	n       atomic.Int32
	busy    sync.Mutex // one round at a time
	mu      sync.Mutex // guards timer
	timer   *time.Timer
	noCount sync.Once
}

// startQuotaCheck wraps the routes of the profiles that reconcile quotas.
func (t *Transport) startQuotaCheck(c *config) {
	q := &quotaChecker{tr: weak.Make(t), done: t.bg.ctx, shared: t.shared, log: c.logger, head: t.head}
	if t.shared != nil { // without Redis, nothing is leased or stored: no prefix
		q.rdb, q.prefix = t.shared.Client(), t.shared.Config().Prefix
	}
	for i := range t.profiles {
		p := &t.profiles[i]
		if p.QuotaCheck == nil {
			continue
		}
		route, check := p.Route, p.QuotaCheck
		p.Route = func(req *http.Request) (providers.Route, error) {
			r, err := route(req)
			if err == nil {
				if qt, ok := check.Target(req, &r); ok {
					q.note(p, check, qt)
				}
			}
			return r, err
		}
	}
}

// note keeps the latest token of a quota: a compare when it is unchanged.
// A quota met for the first time is read at once, off the request path.
func (q *quotaChecker) note(p *profile, check *providers.QuotaCheck, qt providers.QuotaTarget) {
	k := quotaTargetKey{p.Name, qt.Rule.Key()}
	now := time.Now().UnixNano()
	if v, ok := q.targets.Load(k); ok {
		e := v.(*quotaEntry)
		if c := e.cur.Load(); c.Token != qt.Token || c.Origin != qt.Origin || c.Host != qt.Host || c.Rule.Limit() != qt.Rule.Limit() {
			e.cur.Store(&qt)
		}
		e.named.Store(now)
		return
	}
	if q.n.Load() >= maxQuotaTargets {
		return
	}
	e := &quotaEntry{key: k, p: p, check: check}
	e.cur.Store(&qt)
	e.named.Store(now)
	if _, had := q.targets.LoadOrStore(k, e); had {
		return
	}
	q.n.Add(1)
	q.arm(0)
}

// arm runs a round after d, unless one is due sooner.
func (q *quotaChecker) arm(d time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.done.Err() != nil {
		return
	}
	if q.timer == nil {
		q.timer = time.AfterFunc(d, q.round)
		return
	}
	q.timer.Reset(d) // a round under way re-arms for what is left
}

// round reads every quota due, then arms for the next one due.
func (q *quotaChecker) round() {
	q.busy.Lock()
	defer q.busy.Unlock()
	tr := q.tr.Value()
	if tr == nil || q.done.Err() != nil {
		return
	}
	now := time.Now()
	next := time.Duration(-1)
	q.targets.Range(func(k, v any) bool {
		e := v.(*quotaEntry)
		if now.Sub(time.Unix(0, e.named.Load())) > idleReadings*e.check.Every {
			// Idle: forgotten, making room in maxQuotaTargets; kept after
			// all when a request named it as it went (that request's note
			// found the entry it was updating).
			q.targets.Delete(k)
			q.n.Add(-1)
			if time.Since(time.Unix(0, e.named.Load())) <= idleReadings*e.check.Every {
				if _, had := q.targets.LoadOrStore(k, e); !had {
					q.n.Add(1)
				}
			}
			return q.done.Err() == nil
		}
		if !now.Before(e.next) {
			q.read(tr, e)
		}
		if d := time.Until(e.next); next < 0 || d < next {
			next = d
		}
		return q.done.Err() == nil
	})
	if next >= 0 {
		q.arm(max(next, 100*time.Millisecond))
	}
}

// read reads one quota and applies it, unless another replica holds the
// period's lease.
func (q *quotaChecker) read(tr *Transport, e *quotaEntry) {
	t := *e.cur.Load()
	every := e.check.Every
	e.next = time.Now().Add(every)
	ctx, cancel := context.WithTimeout(q.done, quotaReadTimeout)
	defer cancel()
	group := e.key.group
	lease := "{" + q.prefix + ":" + group + "}:qc:" + t.App + " " + t.API
	if q.rdb != nil {
		ok, err := q.rdb.SetNX(ctx, lease, "1", every).Result()
		if err != nil {
			e.next = time.Now().Add(min(quotaRetry, every))
			q.log.Debug("throttle: could not take the quota reading's lease", "provider", group, "quota", t.String(), "error", err)
			return
		}
		if !ok {
			return // another replica reads it this period
		}
	}
	seen, asked := int64(-1), time.Now()
	if q.shared != nil {
		if n, err := q.shared.CalendarUsed(ctx, group, []rule.Rule{t.Rule}); err == nil {
			seen = n[0]
		}
	}
	reading, err := q.ask(ctx, tr, e.check, t)
	if err != nil {
		// Backing off: a minute, two, four ..., up to Every.
		e.fails++
		e.next = time.Now().Add(min(quotaRetry<<min(e.fails-1, 10), every))
		if q.rdb != nil {
			// Give the period's lease back, or the retry (this replica's
			// or another's) would wait for it to lapse: a whole Every.
			dctx, dcancel := context.WithTimeout(q.done, quotaReadTimeout)
			q.rdb.Del(dctx, lease)
			dcancel()
		}
		level := slog.LevelWarn
		if e.fails > 1 {
			level = slog.LevelDebug // said once per run of failures
		}
		q.log.Log(ctx, level, "throttle: could not read a quota from the provider", "provider", group, "quota", t.String(),
			"error", RedactError(err), "failures", e.fails)
		return
	}
	e.fails = 0
	q.apply(ctx, e, t, reading, seen, asked)
}

// ask sends the provider's quota query through the Transport, as the app.
func (q *quotaChecker) ask(ctx context.Context, tr *Transport, check *providers.QuotaCheck, t providers.QuotaTarget) (providers.QuotaReading, error) {
	req, err := check.Query(ContextWithApp(ctx, t.App), t)
	if err != nil {
		return providers.QuotaReading{}, err
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return providers.QuotaReading{}, err
	}
	if resp.Body == nil {
		resp.Body = http.NoBody // as net/http.Client does
	}
	defer resp.Body.Close()
	return check.Read(resp)
}

// apply sets the limit the provider states for every replica, and the
// window's count in the shared limiter.
func (q *quotaChecker) apply(ctx context.Context, e *quotaEntry, t providers.QuotaTarget, r providers.QuotaReading, seen int64, asked time.Time) {
	group := e.key.group
	l := providers.Learned{API: t.API, App: t.App, Window: t.Rule.Unit().String(), Limit: r.Limit, Until: time.Now().Add(reconciledTTL)}
	if e.p.Lower != nil && e.p.Lower(l) {
		e.p.lowered.Add(1)
		q.log.Info("throttle: the provider's quota endpoint states another limit; it applies on every replica", "provider", group,
			"app", t.App, "api", t.API, "window", l.Window, "limit", r.Limit, "was", t.Rule.Limit())
	}
	if q.rdb != nil {
		if err := shareLearned(ctx, q.rdb, q.prefix, group, l); err != nil {
			q.log.Warn("throttle: could not share a limit read from the provider", "provider", group, "quota", t.String(), "error", err)
		} else {
			q.head.seenLearned(group, l)
		}
	}
	if q.shared == nil {
		q.noCount.Do(func() {
			q.log.Warn("throttle: the provider's counts are not applied without the shared limiter (WithRedis); its limits are",
				"provider", group)
		})
		return
	}
	n, err := q.shared.SetCalendarUsed(ctx, group, t.Rule, int64(r.Used), seen, asked)
	if errors.Is(err, limiter.ErrWindowEnded) {
		q.log.Debug("throttle: a quota's count arrived after its window ended; the new window keeps its own",
			"provider", group, "quota", t.String())
		return
	}
	if err != nil {
		q.log.Warn("throttle: could not set a quota's count from the provider's", "provider", group, "quota", t.String(), "error", err)
		return
	}
	q.log.Debug("throttle: quota reconciled with the provider", "provider", group, "quota", t.String(),
		"limit", r.Limit, "provider_used", r.Used, "count", n)
}

// seenLearned tells the learners a value this replica wrote and applied,
// so reading it back does not make waiting requests book again.
func (l *headroomLoop) seenLearned(group string, learned providers.Learned) {
	if l == nil {
		return
	}
	for _, lr := range l.learners {
		if lr.name == group {
			lr.mu.Lock()
			lr.seen[learnedhash.Field(learned)] = learnedhash.Value(learned)
			lr.mu.Unlock()
		}
	}
}
