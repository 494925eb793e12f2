package throttle

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/quotaware/throttle/apps"
	"github.com/quotaware/throttle/internal/circuit"
	"github.com/quotaware/throttle/internal/tokens"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/providers"
)

// Transport is an http.RoundTripper that keeps outbound calls within the
// providers' limits. Build it with New; it is safe for concurrent use.
type Transport struct {
	base     http.RoundTripper // the base under token sharing and app learning: matched requests
	direct   http.RoundTripper // the base alone: requests no profile matches, which are not a provider's
	limiter  limiter.Limiter
	profiles []profile
	maxWait  time.Duration
	tel      *telemetry
	retry    *retrier
	shared   *limiter.Shared // the limiter on Redis, whose background work Close stops
	unlisten func()          // stops hearing the shared limiter's news
	bg       *background     // give-backs, releases and penalty writes
	gauges   func()          // takes the Transport out of the gauges
	quota    *quotaWatch
	head     *headroomLoop // measured latency allowances and learned limits (headroom.go, learned.go)

	apps   *apps.Book     // WithApps: learns which app each token belongs to
	tokens *tokens.Sharer // token exchanges shared by the fleet (tokens.go); nil without Redis
	// overTransport: the base is another Transport (nested.go), which is
	// told of the requests this one limited.
	overTransport bool
}

// profile is a providers.Profile with its defaults resolved and its own
// breakers: scopes of different providers may share a name ("egress:default").
type profile struct {
	providers.Profile
	breakers *circuit.Set
	tel      *telemetry
	head     *headroom // nil unless the profile's allowance is measured
	// lowered counts the changes that made a rule of the profile
	// stricter (a limit learned from the provider, a wider latency
	// allowance): a request that waited across one books again.
	lowered *atomic.Int64
	resets  *resets // the provider's recent resets of its quotas (cleared.go)
	lifts   *resets // the penalties lifted lately, by any replica (lift.go)
}

// stop opens this process's breaker for a penalty, wherever it came from
// (source: an "answer", an "announcement", the "shared limiter"), and
// returns its end. It is the one place a penalty is clamped to MaxPenalty:
// a longer one is garbled or hostile (an end in the year 9999 would stop the
// scope for good on every replica) and is logged once per provider and code.
// The end is in UTC from here on, in logs, errors and breakers alike,
// whatever zone the provider's answer wrote it in (Beijing, mostly).
func (p *profile) stop(scope string, until time.Time, code, source string) time.Time {
	until = until.UTC()
	if limit := time.Now().Add(p.MaxPenalty); until.After(limit) {
		p.tel.clampedPenalty(p.Name, code, source, until, p.MaxPenalty)
		until = limit.UTC()
	}
	p.breakers.Penalize(scope, until, code)
	if source != "answer" && p.Heard != nil {
		p.Heard(scope, code, until)
	}
	return until
}

// New returns a Transport configured by opts, or an error naming the option
// at fault. With no options it limits nothing: every request passes through
// to http.DefaultTransport.
func New(opts ...Option) (*Transport, error) {
	c := defaultConfig()
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	over, err := overTransport(&c)
	if err != nil {
		return nil, err
	}
	t := &Transport{base: answering{c.base}, direct: c.base, maxWait: c.maxWait, bg: newBackground(), overTransport: over}
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
		t.profiles = append(t.profiles, profile{Profile: p, breakers: b, tel: t.tel, lowered: new(atomic.Int64), resets: new(resets), lifts: new(resets)})
		if p.Apps > 1 && c.apps == nil {
			// Info, not Warn: a service that tags every request with
			// ContextWithApp is set up right and hears it at every start.
			c.logger.Info("throttle: the profile lists several apps, but without WithApps no request is told apart by its token: "+
				"those not tagged with throttle.ContextWithApp are all charged to the app the profile falls back on, or to the quotas of unknown apps",
				"provider", name, "apps", p.Apps)
		}
	}
	if c.redis != nil {
		// WithRedis is short for WithLimiter(limiter.NewShared(...)).
		s, err := limiter.NewShared(c.redis, limiter.SharedConfig{Logger: c.logger})
		if err != nil {
			return nil, fmt.Errorf("throttle: WithRedis: %w", err)
		}
		c.limiter = s
	}
	// A New that fails leaves a limiter given with WithLimiter as it was
	// (the caller may try again with it): the Transport owns it only once
	// New succeeds. One built above for WithRedis is nobody else's.
	failed := func(err error) (*Transport, error) {
		if s, ok := c.limiter.(*limiter.Shared); ok && c.redis != nil {
			_ = s.Close()
		}
		return nil, err
	}
	// Before the limiter is wired: its watcher reads the profiles' Lower.
	if err := t.startHeadroom(&c); err != nil {
		return failed(err)
	}
	if err := t.buildApps(&c); err != nil {
		t.head.close() // the headroom loop started above
		return failed(err)
	}
	t.buildLimiter(&c)
	t.shareTokens(&c) // token exchanges shared by the fleet (tokens.go)
	if t.apps != nil {
		t.base = t.apps.Observe(t.base) // learn from the token exchanges sent
		// A Transport dropped without Close ends the Book's listener (its
		// Pub/Sub connection and two goroutines) once collected.
		runtime.AddCleanup(t, func(b *apps.Book) { go b.Close() }, t.apps)
	}
	t.retry = newRetrier(c.retry)
	t.startQuotaWatch(&c)
	// A Transport dropped without Close leaves the quota gauges once
	// collected: their callback held the limiter and read it at every
	// collection. In a goroutine of its own, as every such cleanup:
	// unregistering waits for a collection in progress, whose callbacks
	// read Redis.
	runtime.AddCleanup(t, func(q *quotaWatch) { go q.close() }, t.quota)
	t.startQuotaCheck(&c) // quotas reconciled with the provider's count (quota_check.go)
	if !t.tel.disabled && len(t.profiles) > 0 {
		src := &gaugeSource{fallback: &t.tel.fallbackOn}
		for i := range t.profiles {
			src.providers = append(src.providers, t.profiles[i].Name)
			src.breakers = append(src.breakers, t.profiles[i].breakers)
		}
		t.gauges = addGauges(t.tel.meterProvider, src, t.tel.report)
		// A Transport dropped without Close leaves the gauges once collected.
		runtime.AddCleanup(t, func(remove func()) { go remove() }, t.gauges)
	}
	return t, nil
}

// MustNew is New for use in one expression, panicking when an option is
// invalid, like regexp.MustCompile: a configuration error is a programming
// error found at start-up.
//
//	client := &http.Client{Transport: throttle.MustNew(throttle.WithProfiles(p))}
func MustNew(opts ...Option) *Transport {
	t, err := New(opts...)
	if err != nil {
		panic(err)
	}
	return t
}

// Close stops the Transport's background work: the limiter calls no request
// waits for (slots given back, leases ended, penalties written), which get
// a moment to finish, the gauges, and on Redis the shared limiter's replica
// registry beat and penalty watcher, and the shared tokens' work for the
// fleet (a token fetch whose caller left, cancelled; an answer still to be
// written to Redis, dropped). Requests in flight finish; the base
// transport is left alone. A Transport dropped without Close stops that work
// once it is garbage collected.
//
// Close returns within 2s whatever Redis does: the drain,
// then the shared limiter's stop with the time left (see
// limiter.Shared.Shutdown). Work still waiting on a Redis that does not
// answer then ends on its own timeout, and Close returns an error saying so.
func (t *Transport) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), backgroundDrain)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		t.bg.close(backgroundDrain)
		if t.gauges != nil {
			t.gauges()
		}
		t.quota.close()
		t.head.close()
		if t.apps != nil {
			_ = t.apps.Close()
		}
		var tokErr error
		if t.tokens != nil {
			// The shared tokens' background work: a rotating fetch whose
			// caller left, an answer still to be written for the fleet.
			tokErr = t.tokens.Close(ctx)
		}
		if t.shared != nil {
			t.unlisten()
			// What the drain left of the time.
			done <- errors.Join(tokErr, t.shared.Shutdown(ctx))
			return
		}
		done <- tokErr
	}()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("throttle: Close: %w", err)
		}
		return nil
	case <-ctx.Done():
		select {
		case err := <-done: // the limiter's own answer says more
			if err != nil {
				return fmt.Errorf("throttle: Close: %w", err)
			}
			return nil
		default:
		}
		// The drain (its workers cut short) or unregistering the gauges
		// outlived the time: they end on their own timeouts.
		if t.shared != nil {
			_ = t.shared.Shutdown(ctx) // tell its background work to stop
		}
		return fmt.Errorf("throttle: Close: background work still waiting after %v: %w", backgroundDrain, context.Cause(ctx))
	}
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	p := t.match(req)
	if p == nil {
		if !limitedAbove(req) {
			t.tel.unmatched.record(req, t.tel.log)
		}
		// Not a provider's: no exchange of it is shared, no token of it
		// watched, no app learned from it.
		return t.direct.RoundTrip(req)
	}
	if t.overTransport {
		req = markLimited(req)
	}
	if req.Method == "" {
		// net/http sends an empty Method as GET, and every layer below
		// (catalog routes, token exchanges, apps, retries) reads it as
		// GET from here. Read as "", a request built as a struct literal
		// fell to the uncatalogued stand-in, and its token exchange was
		// never shared. On a copy, as below.
		cp := *req
		cp.Method = http.MethodGet
		req = &cp
	}
	caller := req
	// The budget counts from here: a token exchange's wait for another
	// replica's fetch (storedExchange) comes off the limiter's.
	start := time.Now()
	if t.tokens != nil && tokens.IsExchange(req) {
		// Every wait of the exchange for another replica's fetch, the one
		// after the limiter's too, comes off this budget.
		req = req.WithContext(tokens.BudgetFrom(req.Context(), start))
		resp, sent, err := t.storedExchange(req, p)
		if resp == nil && err != nil {
			return nil, t.exchangeNotSent(p, sent, start, err)
		}
		if resp != nil || err != nil {
			return resp, err
		}
		req = sent
	}
	if req == caller && req.Body != nil && req.Body != http.NoBody {
		// The app's token or a route may be read from the body
		// (providers.PeekRequestBody puts in a body that replays what it
		// read): on a copy, since RoundTrip must not modify the caller's
		// request.
		cp := *req
		req = &cp
	}
	req = t.resolveApp(req, p)
	allowance := p.allowance() // before the route: see call.allowance
	route, err := p.Route(req)
	if err != nil {
		closeBody(req)
		if !strings.HasPrefix(err.Error(), p.Name+": ") { // presets name themselves
			err = fmt.Errorf("%s: %w", p.Name, err)
		}
		err = fmt.Errorf("throttle: %w", err)
		// A config that cannot route (a DingTalk ISV app without its
		// org) fails every such call: it shows, as every matched
		// request does.
		t.tel.finish(req.Context(), &call{t: t, p: p, start: start, outcome: outcomeRouteError}, nil, err)
		return nil, err
	}
	call := &call{t: t, p: p, route: route, allowance: allowance, start: start}
	if t.retry != nil {
		return t.retry.do(req, call)
	}
	resp, err := call.attempt(req)
	t.tel.finish(req.Context(), call, resp, err)
	return resp, err
}

// CloseIdleConnections closes the idle connections of the base transport,
// so that http.Client.CloseIdleConnections reaches them. It asks the base
// itself: the layers New wraps around it (token sharing, apps) keep no
// connections.
func (t *Transport) CloseIdleConnections() {
	if c, ok := t.direct.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

func (t *Transport) match(req *http.Request) *profile {
	for i := range t.profiles {
		if t.profiles[i].Match(req) {
			return &t.profiles[i]
		}
	}
	if req.URL == nil || req.Host == "" || req.Host == req.URL.Host {
		return nil
	}
	// Sent to a gateway by its URL, naming the provider in its Host
	// header (the gateway forwards by it): the request goes to the
	// provider all the same. Tried only once no profile took the URL,
	// so a profile of the gateway's own address keeps its requests.
	u := *req.URL
	u.Host = req.Host
	byHost := *req
	byHost.URL = &u
	for i := range t.profiles {
		if t.profiles[i].Match(&byHost) {
			return &t.profiles[i]
		}
	}
	return nil
}
