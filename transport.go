package throttle

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"

	"github.com/quotaware/throttle/apps"
	"github.com/quotaware/throttle/circuit"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/rule"
	"github.com/quotaware/throttle/providers"
)

// Transport is an http.RoundTripper that keeps outbound calls within the
// providers' limits. Build it with New; it is safe for concurrent use.
type Transport struct {
	base     http.RoundTripper
	limiter  limiter.Limiter
	profiles []profile
	maxWait  time.Duration
	tel      *telemetry
	retry    *retrier
	shared   *limiter.Shared // the limiter on Redis, whose background work Close stops
	bg       *background     // give-backs, releases and penalty writes
	gauges   func()          // takes the Transport out of the gauges
	quota    *quotaWatch
	head     *headroomLoop // measured latency allowances and learned limits (headroom.go, learned.go)

	apps *apps.Book // WithApps: learns which app each token belongs to
}

// profile is a providers.Profile with its defaults resolved and its own
// breakers: scopes of different providers may share a name ("egress:default").
type profile struct {
	providers.Profile
	breakers *circuit.Set
	tel      *telemetry
	head     *headroom // nil unless the profile's allowance is measured
	// lowered counts the learned limits that lowered a rule of the
	// profile: a request that waited across one books again.
	lowered *atomic.Int64
}

// bound clamps a penalty's end to MaxPenalty from now. A longer penalty is
// garbled or hostile (an end in the year 9999 would stop the scope for good
// on every replica); it is logged once per provider and code. source says
// where the end came from, for the log.
func (p *profile) bound(until time.Time, code, source string) time.Time {
	limit := time.Now().Add(p.MaxPenalty)
	if !until.After(limit) {
		return until
	}
	p.tel.clampedPenalty(p.Name, code, source, until, p.MaxPenalty)
	return limit
}

// New returns a Transport configured by opts, for use in one expression:
//
//	client := &http.Client{Transport: throttle.New(throttle.WithProfiles(p))}
//
// With no options it limits nothing: every request passes through to
// http.DefaultTransport. New panics when an option is invalid, like
// regexp.MustCompile, because that is a programming error found at start-up;
// use Build to get the error instead.
func New(opts ...Option) *Transport {
	t, err := Build(opts...)
	if err != nil {
		panic(err)
	}
	return t
}

// Build is New returning the configuration error, which names the option at
// fault, instead of panicking.
func Build(opts ...Option) (*Transport, error) {
	c := defaultConfig()
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	t := &Transport{base: c.base, maxWait: c.maxWait, bg: newBackground(), apps: c.apps}
	if t.apps != nil {
		t.base = t.apps.Observe(t.base) // learn from the token exchanges sent
	}
	t.tel = newTelemetry(&c)
	for _, p := range c.profiles {
		if p.DefaultPenalty == 0 {
			p.DefaultPenalty = providers.DefaultPenalty
		}
		if p.MaxPenalty == 0 {
			p.MaxPenalty = providers.DefaultMaxPenalty
		}
		name := p.Name
		b, err := circuit.New(circuit.WithOnStateChange(func(scope string, from, to circuit.State) {
			if from == circuit.HalfOpen && to == circuit.Closed {
				c.logger.Info("throttle: penalty over, scope called again", "provider", name, "scope", scope)
			}
		}))
		if err != nil {
			return nil, fmt.Errorf("throttle: %w", err)
		}
		t.profiles = append(t.profiles, profile{Profile: p, breakers: b, tel: t.tel, lowered: new(atomic.Int64)})
	}
	// Before the limiter: its watcher reads the profiles' Lower.
	if err := t.startHeadroom(&c); err != nil {
		return nil, err
	}
	if err := t.buildLimiter(&c); err != nil {
		return nil, err
	}
	t.retry = newRetrier(c.retry)
	t.startQuotaWatch(&c)
	if !t.tel.disabled && len(t.profiles) > 0 {
		src := &gaugeSource{fallback: &t.tel.fallbackOn}
		for i := range t.profiles {
			src.providers = append(src.providers, t.profiles[i].Name)
			src.breakers = append(src.breakers, t.profiles[i].breakers)
		}
		t.gauges = addGauges(t.tel.meterProvider, src, t.tel.report)
		// A Transport dropped without Close leaves the gauges once collected.
		runtime.AddCleanup(t, func(remove func()) { remove() }, t.gauges)
	}
	return t, nil
}

// buildLimiter picks the limiter: the one given, the shared one on Redis,
// or an in-process one.
func (t *Transport) buildLimiter(c *config) error {
	switch {
	case c.limiter != nil:
		t.limiter = c.limiter
		return nil
	case c.redis == nil:
		t.limiter = limiter.NewMemory()
		return nil
	}
	if !contextTimeouts(c.redis) {
		c.logger.Warn("throttle: the Redis client ignores context deadlines; set ContextTimeoutEnabled: true in its options, " +
			"or a Redis that stops answering holds requests for the client's read timeout instead of the fallback timeout")
	}
	// The callbacks hold the telemetry and the breakers, never the
	// Transport, so background goroutines do not keep it from collection.
	tel, mode := t.tel, c.fallback.Mode
	s, err := limiter.NewShared(c.redis, limiter.SharedConfig{
		Prefix:    c.redisPrefix,
		Mode:      mode.outageMode(),
		Share:     c.fallback.Share,
		Timeout:   c.fallback.Timeout,
		Probe:     c.fallback.Probe,
		Recover:   c.fallback.Recover,
		OnSwitch:  func(down bool, err error) { tel.fallbackSwitch(down, mode, err) },
		OnPenalty: penaltyRouter(t.profiles, t.head),
		OnLift:    liftRouter(t.profiles, c.logger),
		OnEvent:   limiterEvents(c),
		Logger:    c.logger,
	})
	if err != nil {
		return fmt.Errorf("throttle: WithRedis: %w", err)
	}
	t.limiter, t.shared = s, s
	// A Transport dropped without Close stops that work once collected;
	// a cleanup must not block, so it only starts the stop.
	runtime.AddCleanup(t, func(s *limiter.Shared) { go s.Close() }, s)
	return nil
}

// penaltyRouter opens this process's breaker for a penalty another replica
// wrote, as soon as Redis announces it: a request that booked its slot
// before the penalty then never sends inside it. It holds the breakers, not
// the Transport, so an unreferenced Transport can still be collected.
func penaltyRouter(profiles []profile, learned *headroomLoop) func(group string, p limiter.Penalty) {
	byName := make(map[string]*profile, len(profiles))
	for i := range profiles {
		byName[profiles[i].Name] = &profiles[i]
	}
	return func(group string, p limiter.Penalty) {
		if prof := byName[group]; prof != nil {
			prof.breakers.Penalize(p.Scope, prof.bound(p.Until, p.Code, "announcement"), p.Code)
			if prof.Lower != nil {
				// The replica that was refused wrote the limit it learned
				// before the penalty: read it while the penalty holds.
				learned.pokeLearned()
			}
		}
	}
}

// contextTimeouts reports whether a go-redis client honours context
// deadlines (ContextTimeoutEnabled), which the fallback timeout relies on.
func contextTimeouts(c redis.UniversalClient) bool {
	switch c := c.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return true // unknown implementations: assume they do
}

// Close stops the Transport's background work: the limiter calls no request
// waits for (slots given back, leases ended, penalties written), which get
// a moment to finish, the gauges, and on Redis the shared limiter's replica
// registry beat and penalty watcher. Requests in flight finish; the base
// transport is left alone. A Transport dropped without Close stops that work
// once it is garbage collected.
func (t *Transport) Close() error {
	t.bg.close(backgroundDrain)
	if t.gauges != nil {
		t.gauges()
	}
	t.quota.close()
	t.head.close()
	if t.shared != nil {
		return t.shared.Close()
	}
	return nil
}

// Limiter returns the limiter the Transport reserves slots from.
func (t *Transport) Limiter() limiter.Limiter { return t.limiter }

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	p := t.match(req)
	if p == nil {
		t.tel.unmatched.record(req, t.tel.log)
		return t.base.RoundTrip(req)
	}
	req = t.resolveApp(req, p)
	route, err := p.Route(req)
	if err != nil {
		closeBody(req)
		return nil, fmt.Errorf("throttle: %s: %w", p.Name, err)
	}
	call := &call{t: t, p: p, route: route, start: time.Now()}
	if t.retry != nil {
		return t.retry.do(req, call)
	}
	resp, err := call.attempt(req)
	t.tel.finish(req.Context(), call, resp, err)
	return resp, err
}

// CloseIdleConnections closes the idle connections of the base transport,
// so that http.Client.CloseIdleConnections reaches them.
func (t *Transport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

func (t *Transport) match(req *http.Request) *profile {
	for i := range t.profiles {
		if t.profiles[i].Match(req) {
			return &t.profiles[i]
		}
	}
	return nil
}

// call is one RoundTrip of a matched request, across its attempts.
type call struct {
	t     *Transport
	p     *profile
	route providers.Route
	start time.Time

	attempts int
	waited   time.Duration
	outcome  string
	verdict  providers.Verdict
	events   []spanEvent

	// For retries: whether the last attempt's request was written.
	wrote atomic.Bool
}

// budget is how long the call may still wait: the smaller of the time left
// of WithMaxWait since the call started and of the context deadline.
func (c *call) budget(ctx context.Context) time.Duration {
	b := c.t.maxWait - time.Since(c.start)
	if dl, ok := ctx.Deadline(); ok {
		b = min(b, time.Until(dl))
	}
	return max(b, 0)
}

// attempt reserves a slot, waits for it, sends once and reads the verdict.
func (c *call) attempt(req *http.Request) (*http.Response, error) {
	c.attempts++
	c.verdict = providers.Verdict{}
	if err := req.Context().Err(); err != nil {
		// The caller gave up before this attempt: nothing to reserve.
		closeBody(req)
		c.outcome = outcomeCancelled
		return nil, err
	}
	// Local breakers first: a scope known to be penalised costs no I/O.
	done, err := c.p.breakers.Allow(c.route.Scopes)
	if err != nil {
		closeBody(req)
		c.outcome = outcomePenalized
		pe := &PenaltyError{Provider: c.p.Name, API: c.route.API}
		var oe *circuit.OpenError
		if errors.As(err, &oe) {
			pe.Scope, pe.Until, pe.Code = oe.Scope, oe.Until, oe.Code
		}
		return nil, pe
	}
	resp, err := c.reserveAndSend(req)
	switch {
	case err != nil:
		done(circuit.Ignored)
	case c.verdict.Kind == providers.OK:
		done(circuit.Success)
	default:
		// A quota verdict was reported through Penalize already.
		done(circuit.Ignored)
	}
	return resp, err
}

func (c *call) reserveAndSend(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
rebooked:
	gen := c.p.lowered.Load()
	lreq := limiter.Request{Group: c.p.Name, Rules: c.route.Rules, Scopes: c.route.Scopes, MaxWait: c.budget(ctx)}
	res, err := c.reserve(ctx, &lreq)
	if err != nil {
		closeBody(req)
		return nil, err
	}
	var slot time.Time // when the slot was booked for: latency is measured from it
	if c.p.head != nil {
		slot = time.Now().Add(res.Delay())
	}
	if d := res.Delay(); d > 0 {
		if err := res.Wait(ctx); err != nil {
			// The slot will not be used: give it back so the next caller
			// can have it.
			c.giveBack(ctx, res)
			closeBody(req)
			c.outcome = outcomeCancelled
			return nil, contextError(ctx, err)
		}
		c.waited += d
		// A quota error may have come back while this request waited: a
		// slot booked before it must not be spent inside the penalty.
		if pe := c.openScope(); pe != nil {
			c.giveBack(ctx, res)
			closeBody(req)
			c.outcome = outcomePenalized
			return nil, pe
		}
		// A rule was lowered to a limit the provider stated while this
		// request waited: its slot was booked at the old pace, so it
		// books again under the new rules (learned.go).
		if c.p.lowered.Load() != gen {
			if rt, err := c.p.Route(req); err == nil {
				c.giveBack(ctx, res)
				c.route = rt
				goto rebooked
			}
		}
	}
	resp, err := c.t.base.RoundTrip(req)
	if c.p.head != nil && err == nil {
		c.p.head.observe(slot)
	}
	if c.route.HasConcurrency() {
		// The answer is here (or never will be): end the in-flight lease,
		// off the request path.
		// Copies, so that only this branch moves them to the heap.
		rs := res
		c.t.bg.do(ctx, func(ctx context.Context) error { return rs.Release(ctx) }, nil)
	}
	if err != nil {
		c.outcome = outcomeTransportError
		return nil, err
	}
	if c.p.Classify != nil {
		c.verdict = c.p.Classify(req, resp, &c.route)
	}
	c.outcome = outcomeFor(c.verdict.Kind, c.waited > 0)
	if c.verdict.Kind == providers.Quota {
		c.penalize(ctx)
	}
	return resp, nil
}

// openScope returns the penalty of one of the request's scopes that this
// process knows to be open, or nil.
func (c *call) openScope() *PenaltyError {
	if c.p.breakers.Len() == 0 {
		return nil
	}
	for _, sc := range c.route.Scopes {
		if until, code, open := c.p.breakers.Penalty(sc); open {
			return &PenaltyError{Provider: c.p.Name, API: c.route.API, Scope: sc, Until: until, Code: code}
		}
	}
	return nil
}

// reserve takes a slot, or returns the error that refuses the request. A
// request refused for want of an in-flight lease (a concurrency rule), or
// by a narrow rule that does not book ahead (rule.WithMaxBookAhead: one
// chat or member among many sharing the app's rules), asks again when the
// rule's slot comes, if that is within its budget; otherwise it fails at
// once, as x/time/rate's Wait does.
func (c *call) reserve(ctx context.Context, lreq *limiter.Request) (limiter.Reservation, error) {
	for {
		var began time.Time
		if !c.t.tel.disabled {
			began = time.Now() // clock reads cost ~100ns here; skip them when nobody records
		}
		res, err := c.t.limiter.Reserve(ctx, *lreq)
		if !c.t.tel.disabled {
			c.t.tel.limiterCall(ctx, c, time.Since(began))
		}
		if err != nil {
			if ctx.Err() != nil {
				// The caller gave up (or its deadline passed) during the
				// call: that says nothing about the limiter.
				c.outcome = outcomeCancelled
				return res, ctx.Err()
			}
			c.outcome = outcomeLimiterError
			if errors.Is(err, limiter.ErrInvalidRequest) {
				// The profile's route cannot be limited (a scope too
				// long, say): a configuration error, not an outage.
				return res, fmt.Errorf("throttle: %s %s: %w", c.p.Name, c.route.API, err)
			}
			return res, fmt.Errorf("%w: %s: %w", ErrLimiterUnavailable, c.p.Name, err)
		}
		if res.OK() {
			return res, nil
		}
		if pen := res.Penalty(); pen != nil {
			// Another replica saw the quota error: stop locally too.
			until := c.p.bound(pen.Until, pen.Code, "shared limiter")
			c.p.breakers.Penalize(pen.Scope, until, pen.Code)
			c.outcome = outcomePenalized
			return res, &PenaltyError{Provider: c.p.Name, API: c.route.API, Scope: pen.Scope, Until: until, Code: pen.Code}
		}
		var bound rule.Rule
		if i := res.Rule(); i >= 0 && i < len(lreq.Rules) {
			bound = lreq.Rules[i]
		}
		_, heldBack := bound.MaxBookAhead()
		if (bound.IsConcurrency() || heldBack) && res.RetryAfter() <= c.budget(ctx) {
			wait := res.RetryAfter()
			if heldBack {
				wait -= c.lead(ctx, bound)
				if !c.t.tel.disabled {
					c.event("throttle.entity_wait", attribute.Float64("throttle.wait_s", wait.Seconds()))
				}
			}
			if err := sleepCtx(ctx, wait); err != nil {
				c.outcome = outcomeCancelled
				return res, err
			}
			c.waited += wait
			lreq.MaxWait = c.budget(ctx)
			continue
		}
		c.outcome = outcomeThrottled
		e := &ThrottledError{Provider: c.p.Name, API: c.route.API, RetryAfter: res.RetryAfter(), Budget: lreq.MaxWait}
		switch {
		case bound.Limit() > 0:
			e.Rule = bound.String()
		case res.Local():
			// No rule of its own held it: a replica limiting on its own
			// starts its slots after those the shared limiter booked.
			e.Rule = "the local fallback's hold behind the shared limiter's booked slots"
		default:
			e.Rule = "the limiter"
		}
		return res, e
	}
}

// lead is how long before a held-back request's slot it asks again: the
// rule admits a request up to its cap ahead (rule.WithMaxBookAhead), so
// the first to ask within the cap takes the slot. A request that has used
// more of its budget asks earlier, so an entity's waiters, on every
// replica, go about in the order they came and the oldest is not the one
// to miss its deadline.
func (c *call) lead(ctx context.Context, r rule.Rule) time.Duration {
	ahead, _ := r.MaxBookAhead()
	age, left := time.Since(c.start), c.budget(ctx)
	if ahead <= 0 || age <= 0 {
		return 0
	}
	return time.Duration(float64(ahead) * float64(age) / float64(age+left))
}

// sleepCtx sleeps d on a timer (a retry's backoff, a wait for a rule's
// slot), returning early with the context's error; d <= 0 only checks ctx.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// contextError is the error of a wait cut short: the context's own error
// when it is done, so errors.Is finds context.Canceled or
// context.DeadlineExceeded and nothing else.
func contextError(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	return err
}

// giveBack returns a slot that will not be used, off the request path.
func (c *call) giveBack(ctx context.Context, res limiter.Reservation) {
	c.t.bg.do(ctx, func(ctx context.Context) error { return res.Cancel(ctx) }, nil)
}

// penalize shares the provider's quota verdict with every replica.
func (c *call) penalize(ctx context.Context) {
	v := &c.verdict
	if v.Scope == "" && len(c.route.Scopes) > 0 {
		v.Scope = c.route.Scopes[0]
	}
	if v.Scope == "" {
		return
	}
	if v.Until.IsZero() {
		v.Until = time.Now().Add(c.p.DefaultPenalty)
	}
	v.Until = c.p.bound(v.Until, v.Code, "answer")
	// This process stops at once; the other replicas once the penalty is
	// written, off the request path.
	c.p.breakers.Penalize(v.Scope, v.Until, v.Code)
	c.t.tel.penalty(ctx, c)
	learned := c.learn()
	lim, tel, name, pen := c.t.limiter, c.t.tel, c.p.Name, limiter.Penalty{Scope: v.Scope, Until: v.Until, Code: v.Code}
	c.t.bg.do(ctx, func(ctx context.Context) error {
		// The learned limit first: the penalty's announcement tells the
		// other replicas to read it.
		learned(ctx)
		return lim.Penalize(ctx, name, pen)
	}, func(err error) {
		if err != nil {
			tel.log.Warn("throttle: could not share a penalty", "provider", name,
				"scope_kind", scopeKind(pen.Scope), "error", err)
		}
	})
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}
