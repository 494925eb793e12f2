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

	"github.com/quotaware/throttle/apps"
	"github.com/quotaware/throttle/circuit"
	"github.com/quotaware/throttle/limiter"
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
	registry *limiter.Registry
	watcher  func() // stops the penalty watcher

	apps *apps.Book // WithApps: learns which app each token belongs to
}

// profile is a providers.Profile with its defaults resolved and its own
// breakers: scopes of different providers may share a name ("egress:default").
type profile struct {
	providers.Profile
	breakers *circuit.Set
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
	t := &Transport{base: c.base, maxWait: c.maxWait, apps: c.apps}
	if t.apps != nil {
		t.base = t.apps.Observe(t.base) // learn from the token exchanges sent
	}
	t.tel = newTelemetry(&c)
	for _, p := range c.profiles {
		if p.DefaultPenalty == 0 {
			p.DefaultPenalty = providers.DefaultPenalty
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
		t.profiles = append(t.profiles, profile{Profile: p, breakers: b})
	}
	sets := make([]*circuit.Set, len(t.profiles))
	for i := range t.profiles {
		sets[i] = t.profiles[i].breakers
	}
	t.tel.openBreakers = func() (n int) {
		for _, b := range sets {
			n += b.Open()
		}
		return n
	}
	if err := t.buildLimiter(&c); err != nil {
		return nil, err
	}
	t.retry = newRetrier(c.retry)
	return t, nil
}

// buildLimiter picks the limiter: the one given, Redis behind a failover,
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
	r, err := limiter.NewRedis(c.redis, limiter.WithPrefix(c.redisPrefix))
	if err != nil {
		return fmt.Errorf("throttle: WithRedis: %w", err)
	}
	if !contextTimeouts(c.redis) {
		c.logger.Warn("throttle: the Redis client ignores context deadlines; set ContextTimeoutEnabled: true in its options, " +
			"or a Redis that stops answering holds requests for the client's read timeout instead of the fallback timeout")
	}
	// The callbacks hold the telemetry and the Redis limiter, never the
	// Transport, so background goroutines do not keep it from collection.
	tel, mode, timeout := t.tel, c.fallback.Mode, c.fallback.Timeout
	fc := limiter.FailoverConfig{
		Mode:    limiter.FailoverMode(mode),
		Timeout: timeout,
		Probe:   c.fallback.Probe,
		OnSwitch: func(down bool, err error) {
			tel.fallbackSwitch(down, mode, err)
			if !down {
				// The replicas still on their own shares would add them to
				// the full rate this one now takes from Redis until their
				// next probe: tell them to ask at once.
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				_ = r.AnnounceBack(ctx)
				cancel()
			}
		},
	}
	if share := c.fallback.Share; share > 0 {
		fc.Share = func() float64 { return share }
	} else if c.fallback.Mode == FallbackLocal {
		t.registry = limiter.StartRegistry(c.redis, c.redisPrefix, registryBeat)
		fc.Share = t.registry.Share
		// A Transport dropped without Close stops beating once collected.
		runtime.AddCleanup(t, func(r *limiter.Registry) { r.Close() }, t.registry)
	}
	fo := limiter.NewFailover(r, fc)
	t.limiter = fo
	t.watcher = r.WatchPenalties(penaltyRouter(t.profiles), fo.ProbeNow)
	// A Transport dropped without Close stops watching once collected.
	runtime.AddCleanup(t, func(stop func()) { stop() }, t.watcher)
	return nil
}

// penaltyRouter opens this process's breaker for a penalty another replica
// wrote, as soon as Redis announces it: a request that booked its slot
// before the penalty then never sends inside it. It holds the breakers, not
// the Transport, so an unreferenced Transport can still be collected.
func penaltyRouter(profiles []profile) func(group string, p limiter.Penalty) {
	byName := make(map[string]*circuit.Set, len(profiles))
	for i := range profiles {
		byName[profiles[i].Name] = profiles[i].breakers
	}
	return func(group string, p limiter.Penalty) {
		if b := byName[group]; b != nil {
			b.Penalize(p.Scope, p.Until, p.Code)
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

// registryBeat is how often a Transport on Redis renews its presence in the
// replica registry.
const registryBeat = 2 * time.Second

// Close stops the Transport's background work on Redis (the replica
// registry beat and the penalty watcher). Requests in flight finish; the base
// transport is left alone. A Transport dropped without Close stops that work
// once it is garbage collected.
func (t *Transport) Close() error {
	if t.registry != nil {
		t.registry.Close()
	}
	if t.watcher != nil {
		t.watcher()
	}
	return nil
}

// Limiter returns the limiter the Transport reserves slots from.
func (t *Transport) Limiter() limiter.Limiter { return t.limiter }

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	p := t.match(req)
	if p == nil {
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

	// For retries: whether the last attempt's request was written, and
	// the wait before the next attempt.
	wrote    atomic.Bool
	nextWait time.Duration
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
	budget := c.budget(ctx)
	lreq := limiter.Request{Group: c.p.Name, Rules: c.route.Rules, Scopes: c.route.Scopes, MaxWait: budget}
	res, err := c.reserve(ctx, &lreq)
	if err != nil {
		closeBody(req)
		return nil, err
	}
	if res.Delay > 0 {
		if err := res.Sleep(ctx); err != nil {
			// The slot will not be used: give it back so the next caller
			// can have it. The request's context is done, so cancel on a
			// context of its own.
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			_ = c.t.limiter.Cancel(cctx, lreq, res)
			cancel()
			closeBody(req)
			c.outcome = outcomeCancelled
			return nil, err
		}
		c.waited += res.Delay
		// A quota error may have come back while this request waited: a
		// slot booked before it must not be spent inside the penalty.
		if pe := c.openScope(); pe != nil {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			_ = c.t.limiter.Cancel(cctx, lreq, res)
			cancel()
			closeBody(req)
			c.outcome = outcomePenalized
			return nil, pe
		}
	}
	resp, err := c.t.base.RoundTrip(req)
	if c.route.HasConcurrency() {
		// The answer is here (or never will be): end the in-flight lease.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_ = c.t.limiter.Release(rctx, lreq, res)
		cancel()
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
// request refused for want of an in-flight lease (a concurrency rule) asks
// again when one may be free, within its budget.
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
			c.outcome = outcomeLimiterError
			return res, fmt.Errorf("%w: %s: %w", ErrLimiterUnavailable, c.p.Name, err)
		}
		if res.OK {
			return res, nil
		}
		if pen := res.Penalty; pen != nil {
			// Another replica saw the quota error: stop locally too.
			c.p.breakers.Penalize(pen.Scope, pen.Until, pen.Code)
			c.outcome = outcomePenalized
			return res, &PenaltyError{Provider: c.p.Name, API: c.route.API, Scope: pen.Scope, Until: pen.Until, Code: pen.Code}
		}
		var bound limiter.Rule
		if res.Rule >= 0 && res.Rule < len(lreq.Rules) {
			bound = lreq.Rules[res.Rule]
		}
		if bound.IsConcurrency() && res.RetryAfter <= c.budget(ctx) {
			if err := c.wait(ctx, res.RetryAfter); err != nil {
				c.outcome = outcomeCancelled
				return res, err
			}
			c.waited += res.RetryAfter
			lreq.MaxWait = c.budget(ctx)
			continue
		}
		c.outcome = outcomeThrottled
		e := &ThrottledError{Provider: c.p.Name, API: c.route.API, RetryAfter: res.RetryAfter, Budget: lreq.MaxWait}
		if bound.Limit() > 0 {
			e.Rule = bound.String()
		}
		return res, e
	}
}

// wait sleeps d on a timer, returning early with the context's error.
func (c *call) wait(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
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
	c.p.breakers.Penalize(v.Scope, v.Until, v.Code)
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	err := c.t.limiter.Penalize(pctx, c.p.Name, limiter.Penalty{Scope: v.Scope, Until: v.Until, Code: v.Code})
	c.t.tel.penalty(ctx, c, err)
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}
