package throttle

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/rule"
	"github.com/quotaware/throttle/providers"
)

// Quota gauges: for every calendar rule (a daily or monthly quota) the
// Transport has met, throttle.quota.used and throttle.quota.limit, per
// provider and rule, so that an alert can fire at 80% of the month's
// DingTalk quota. They read the counts the limiter keeps (one Redis round
// trip per provider per collection), never count on their own.
//
// Attributes are low cardinality: provider, rule (the rule key up to its
// first ':', e.g. "month" for "month:<org>", never the ID after it) and
// window ("day", "month"). When several keys share a rule name (an ISV app
// with many customer orgs), the gauges report the key nearest its limit,
// which is the one an alert is about.

// maxKnownQuotas bounds the calendar rule keys a Transport tracks (a few
// MB of heap when full), and quotaIdle is how long one no route names
// stays tracked once the bound is reached (below it, every key stays, so
// an org calling once a night keeps its series): with more keys than the
// bound (a DingTalk ISV in 10,000 orgs) the gauges used to watch the first
// 1,024 met for good, so an org met later could pass 80% of its month
// unseen.
const (
	maxKnownQuotas = 16384
	quotaIdle      = time.Hour
)

// quotaGaugeTimeout bounds the read behind one collection.
const quotaGaugeTimeout = 250 * time.Millisecond

type quotaKey struct{ group, key string }

// quotaWatch learns the calendar rules of the routes the Transport builds
// and reports them as gauges. (The shared limiter records them for
// throttlectl itself.)
type quotaWatch struct {
	reader limiter.CalendarReader // nil when the limiter cannot say
	log    *slog.Logger

	// known holds the calendar rules met, by key: read on the request
	// path without a lock, a key added in O(1) however many there are.
	known sync.Map // quotaKey -> *knownQuota
	n     atomic.Int32
	// gen counts the collections (reads); a route marks its rule with the
	// current one, which costs no clock read on the request path. A rule
	// not marked since the generation an idle spell ago is forgotten.
	gen      atomic.Int64
	mu       sync.Mutex // guards the spells; one read at a time
	spellGen int64      // the generation the current spell began at
	spellAt  time.Time  // when it began
	idleGen  int64      // rules marked before it are forgotten

	reg metric.Registration
}

type knownQuota struct {
	rule rule.Rule
	name string       // rule attribute
	seen atomic.Int64 // the generation (quotaWatch.gen) a route last named it in
}

// startQuotaWatch sets up the gauges and wraps each profile's Route so that
// the calendar rules of its routes become known.
func (t *Transport) startQuotaWatch(c *config) {
	q := &quotaWatch{log: c.logger}
	if t.shared != nil {
		// The shared limiter's own Redis reads the counts: no second
		// limiter on the same client.
		q.reader = t.shared
	} else if cr, ok := t.limiter.(limiter.CalendarReader); ok {
		q.reader = cr
	}
	if !c.telemetry.disabled && q.reader != nil {
		for i := range t.profiles {
			p := &t.profiles[i]
			p.Route = q.observe(p.Name, p.Route)
		}
		mp := c.telemetry.meter
		if mp == nil {
			mp = otel.GetMeterProvider()
		}
		if err := q.register(mp.Meter(instrumentationName)); err != nil {
			c.logger.Warn("throttle: telemetry instrument", "error", err)
		}
	}
	t.quota = q
}

// observe wraps a profile's Route: a calendar rule seen for the first time
// becomes known. A route without calendar rules costs a loop over its rules.
func (q *quotaWatch) observe(group string, route func(*http.Request) (providers.Route, error)) func(*http.Request) (providers.Route, error) {
	return func(req *http.Request) (providers.Route, error) {
		r, err := route(req)
		if err == nil {
			for i := range r.Rules {
				if r.Rules[i].Unit() != 0 { // a calendar rule
					q.see(group, r.Rules[i])
				}
			}
		}
		return r, err
	}
}

func (q *quotaWatch) see(group string, r rule.Rule) {
	k := quotaKey{group, r.Key()}
	now := q.gen.Load()
	if v, ok := q.known.Load(k); ok {
		kq := v.(*knownQuota)
		if kq.rule == r {
			if kq.seen.Load() != now {
				kq.seen.Store(now)
			}
			return
		}
		// The rule changed under its key (a limit reconciled with the
		// provider's): the gauge reads the rule in force. Swapped, not
		// stored: a read may have just forgotten the old entry (and
		// counted it out).
		if q.known.CompareAndSwap(k, v, q.entry(r, now)) {
			return
		}
	}
	if q.n.Load() >= maxKnownQuotas {
		return // until idle keys are forgotten (read)
	}
	if _, had := q.known.LoadOrStore(k, q.entry(r, now)); !had {
		q.n.Add(1)
	}
}

// entry is a known rule, named by a route at now.
func (q *quotaWatch) entry(r rule.Rule, now int64) *knownQuota {
	name, _, _ := strings.Cut(r.Key(), ":")
	kq := &knownQuota{rule: r, name: name}
	kq.seen.Store(now)
	return kq
}

// register creates the gauges and their one callback for this Transport.
func (q *quotaWatch) register(m metric.Meter) error {
	used, err := m.Int64ObservableGauge("throttle.quota.used", metric.WithUnit("{request}"),
		metric.WithDescription("Requests counted in the current window of a calendar quota (day, month), per provider and rule."))
	if err != nil {
		return err
	}
	limit, err := m.Int64ObservableGauge("throttle.quota.limit", metric.WithUnit("{request}"),
		metric.WithDescription("Limit of a calendar quota's window, per provider and rule."))
	if err != nil {
		return err
	}
	q.reg, err = m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		for _, g := range q.read(ctx) {
			attrs := metric.WithAttributeSet(attribute.NewSet(
				attribute.String("provider", g.group), attribute.String("rule", g.name), attribute.String("window", g.window)))
			o.ObserveInt64(used, g.used, attrs)
			o.ObserveInt64(limit, g.limit, attrs)
		}
		return nil
	}, used, limit)
	return err
}

// quotaReading is one gauge point.
type quotaReading struct {
	group, name, window string
	used, limit         int64
}

// read reads every known calendar rule, one call per provider, and keeps,
// per provider and rule name, the key nearest its limit. A provider whose
// read fails is left out of this collection.
func (q *quotaWatch) read(ctx context.Context) []quotaReading {
	byGroup := make(map[string][]*knownQuota)
	var groups []string
	q.mu.Lock()
	if now := time.Now(); now.Sub(q.spellAt) >= quotaIdle {
		// A new spell: rules not named since the last one began are
		// forgotten (idle for one to two spells).
		q.idleGen, q.spellGen, q.spellAt = q.spellGen, q.gen.Load(), now
	}
	idle := q.idleGen
	q.gen.Add(1)
	q.mu.Unlock()
	full := q.n.Load() >= maxKnownQuotas
	q.known.Range(func(k, v any) bool {
		kq := v.(*knownQuota)
		if full && kq.seen.Load() < idle {
			if q.known.CompareAndDelete(k, v) {
				q.n.Add(-1)
			}
			return true
		}
		g := k.(quotaKey).group
		if byGroup[g] == nil {
			groups = append(groups, g)
		}
		byGroup[g] = append(byGroup[g], kq)
		return true
	})
	ctx, cancel := context.WithTimeout(ctx, quotaGaugeTimeout)
	defer cancel()
	var out []quotaReading
	for _, g := range groups {
		kqs := byGroup[g]
		rules := make([]rule.Rule, len(kqs))
		for i, kq := range kqs {
			rules[i] = kq.rule
		}
		counts, err := q.reader.CalendarUsed(ctx, g, rules)
		if err != nil {
			continue
		}
		best := make(map[string]int) // rule name → index in out
		for i, kq := range kqs {
			r := quotaReading{group: g, name: kq.name, window: kq.rule.Unit().String(), used: counts[i], limit: int64(kq.rule.Limit())}
			j, seen := best[r.name]
			switch {
			case !seen:
				best[r.name] = len(out)
				out = append(out, r)
			case r.used*out[j].limit > out[j].used*r.limit:
				out[j] = r
			}
		}
	}
	return out
}

// close unregisters the gauges.
func (q *quotaWatch) close() {
	if q != nil && q.reg != nil {
		_ = q.reg.Unregister()
	}
}
