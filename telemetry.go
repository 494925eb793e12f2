package throttle

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/quotaware/throttle/internal/nilness"
	"github.com/quotaware/throttle/providers"
)

// instrumentationName names the library's tracer and meter.
const instrumentationName = "github.com/quotaware/throttle"

// Outcomes of a matched request, the "outcome" attribute of throttle.requests.
const (
	outcomeAdmitted       = "admitted"        // sent at once, provider answered OK
	outcomeWaited         = "waited"          // sent after a wait, provider answered OK
	outcomeThrottled      = "throttled"       // refused: the wait would not fit the budget
	outcomePenalized      = "penalized"       // refused: a scope is penalised
	outcomeQuotaError     = "quota_error"     // sent, the provider answered with a quota error
	outcomeTransientError = "transient_error" // sent, the provider was busy or failed
	outcomeFatalError     = "fatal_error"     // sent, the provider refused for good (token, permission)
	outcomeCancelled      = "cancelled"       // the caller gave up while waiting
	outcomeTransportError = "transport_error" // the base transport failed
	outcomeLimiterError   = "limiter_error"   // the limiter failed and the fallback is to fail closed
	outcomeRouteError     = "route_error"     // the profile could not route it (its config): nothing sent
)

var allOutcomes = []string{
	outcomeAdmitted, outcomeWaited, outcomeThrottled, outcomePenalized, outcomeQuotaError,
	outcomeTransientError, outcomeFatalError, outcomeCancelled, outcomeTransportError, outcomeLimiterError,
	outcomeRouteError,
}

func outcomeFor(k providers.Kind, waited bool) string {
	switch k {
	case providers.Quota:
		return outcomeQuotaError
	case providers.Transient:
		return outcomeTransientError
	case providers.Fatal:
		return outcomeFatalError
	}
	if waited {
		return outcomeWaited
	}
	return outcomeAdmitted
}

type telemetryConfig struct {
	disabled bool
	tracer   trace.TracerProvider
	meter    metric.MeterProvider
}

// WithTracerProvider sets where spans go (default: the global provider).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) {
		if nilness.Is(tp) {
			c.fail("WithTracerProvider: provider must not be nil")
			return
		}
		c.telemetry.tracer = tp
	})
}

// WithMeterProvider sets where metrics go (default: the global provider).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) {
		if nilness.Is(mp) {
			c.fail("WithMeterProvider: provider must not be nil")
			return
		}
		c.telemetry.meter = mp
	})
}

// WithoutTelemetry records no spans and no metrics (logs still go to the
// logger).
func WithoutTelemetry() Option {
	return optionFunc(func(c *config) { c.telemetry.disabled = true })
}

// telemetry records spans, metrics and logs. Every attribute is low
// cardinality (provider, outcome, scope kind, folded API path, code) and none
// carries a credential: request URLs and headers are never recorded.
type telemetry struct {
	disabled bool
	log      *slog.Logger
	tracer   trace.Tracer

	requests    metric.Int64Counter
	waitTime    metric.Float64Histogram
	limiterTime metric.Float64Histogram
	penalties   metric.Int64Counter
	retries     metric.Int64Counter
	fallbacks   metric.Int64Counter
	// uncatalogued counts requests whose path the provider's catalog did
	// not know (providers.Route.Uncatalogued).
	uncatalogued metric.Int64Counter
	// unmatched counts and logs requests to a provider's API host that no
	// profile matched (unmatched.go).
	unmatched *unmatched

	// Attribute sets built once, so recording allocates nothing.
	outcomeSets  map[outcomeKey]metric.MeasurementOption
	providerSets map[string]metric.MeasurementOption

	// fallbackOn is 1 while the limiter is in fallback, for the gauge
	// throttle.limiter.fallback (see gauges.go), which meterProvider and
	// report register.
	fallbackOn    atomic.Int64
	meterProvider metric.MeterProvider
	report        func(error)

	// logged remembers the end of each penalty already logged, so a
	// penalty is logged once however many requests run into it.
	loggedMu sync.Mutex
	logged   map[string]time.Time
	// clamped holds the provider and code of penalties clamped to their
	// profile's MaxPenalty, logged once each.
	clamped map[string]struct{}
}

type outcomeKey struct{ provider, outcome string }

func newTelemetry(c *config) *telemetry {
	tel := &telemetry{log: c.logger, logged: make(map[string]time.Time), clamped: make(map[string]struct{}), disabled: c.telemetry.disabled}
	if tel.disabled {
		tel.unmatched = newUnmatched(nil, nil)
		return tel
	}
	tp, mp := c.telemetry.tracer, c.telemetry.meter
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	tel.tracer = tp.Tracer(instrumentationName)
	m := mp.Meter(instrumentationName)
	report := func(err error) {
		if err != nil {
			c.logger.Warn("throttle: telemetry instrument", "error", err)
		}
	}
	var err error
	tel.requests, err = m.Int64Counter("throttle.requests", metric.WithUnit("{request}"),
		metric.WithDescription("Requests to a provider, by outcome."))
	report(err)
	tel.waitTime, err = m.Float64Histogram("throttle.wait.duration", metric.WithUnit("s"),
		metric.WithDescription("Time requests waited for a slot before being sent."))
	report(err)
	tel.limiterTime, err = m.Float64Histogram("throttle.limiter.duration", metric.WithUnit("s"),
		metric.WithDescription("Latency of one limiter call (one Redis round trip)."))
	report(err)
	tel.penalties, err = m.Int64Counter("throttle.penalties", metric.WithUnit("{penalty}"),
		metric.WithDescription("Quota errors that penalised a scope."))
	report(err)
	tel.retries, err = m.Int64Counter("throttle.retries", metric.WithUnit("{retry}"),
		metric.WithDescription("Attempts after the first."))
	report(err)
	tel.uncatalogued, err = m.Int64Counter("throttle.requests.uncatalogued", metric.WithUnit("{request}"),
		metric.WithDescription("Requests whose path matched no API of the provider's catalog, limited as one stand-in API."))
	report(err)
	tel.fallbacks, err = m.Int64Counter("throttle.limiter.fallbacks", metric.WithUnit("{switch}"),
		metric.WithDescription("Switches to the fallback because the shared limiter did not answer."))
	report(err)
	tel.meterProvider, tel.report = mp, report
	tel.unmatched = newUnmatched(m, report)

	tel.outcomeSets = make(map[outcomeKey]metric.MeasurementOption)
	tel.providerSets = make(map[string]metric.MeasurementOption)
	for _, p := range c.profiles {
		prov := attribute.String("provider", p.Name)
		tel.providerSets[p.Name] = metric.WithAttributeSet(attribute.NewSet(prov))
		for _, o := range allOutcomes {
			tel.outcomeSets[outcomeKey{p.Name, o}] = metric.WithAttributeSet(attribute.NewSet(prov, attribute.String("outcome", o)))
		}
	}
	return tel
}

// limiterCall records one limiter call's latency.
func (tel *telemetry) limiterCall(ctx context.Context, c *call, d time.Duration) {
	if tel.disabled {
		return
	}
	tel.limiterTime.Record(ctx, d.Seconds(), tel.providerSets[c.p.Name])
}

// finish records the call's outcome once, after its last attempt.
func (tel *telemetry) finish(ctx context.Context, c *call, resp *http.Response, err error) {
	if tel.disabled || c.shared && c.attempts == 1 {
		// An exchange answered from Redis at once reached no provider: it
		// counts in throttle.tokens.exchanges alone. One whose earlier
		// attempt failed is a call like any retried one.
		return
	}
	tel.requests.Add(ctx, 1, tel.outcomeSets[outcomeKey{c.p.Name, c.outcome}])
	if c.route.Uncatalogued {
		tel.uncatalogued.Add(ctx, 1, tel.providerSets[c.p.Name])
	}
	tel.waitTime.Record(ctx, c.waited.Seconds(), tel.providerSets[c.p.Name])
	if c.attempts > 1 {
		tel.retries.Add(ctx, int64(c.attempts-1), tel.providerSets[c.p.Name])
	}
	// A span only when throttling did something: waited, refused,
	// penalised, retried or declined a retry. The common fast path records
	// none.
	if c.waited == 0 && c.attempts <= 1 && len(c.events) == 0 && (c.outcome == outcomeAdmitted || c.outcome == outcomeTransportError) {
		return
	}
	_, span := tel.tracer.Start(ctx, "throttle "+c.p.Name, trace.WithTimestamp(c.start),
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(
			attribute.String("throttle.provider", c.p.Name),
			attribute.String("throttle.api", c.route.API),
			attribute.String("throttle.outcome", c.outcome),
			attribute.Float64("throttle.wait_s", c.waited.Seconds()),
			attribute.Int("throttle.attempts", c.attempts),
		))
	for _, ev := range c.events {
		span.AddEvent(ev.name, trace.WithTimestamp(ev.at), trace.WithAttributes(ev.attrs...))
	}
	if err != nil {
		span.SetStatus(codes.Error, safeErrorText(err))
	}
	span.End()
}

// scopeKind returns the kind of a scope "kind:id" ("api", "app", ...): a
// low-cardinality attribute, where the scope itself names an app or a chat.
func scopeKind(scope string) string {
	for i := 0; i < len(scope); i++ {
		if scope[i] == ':' {
			return scope[:i]
		}
	}
	return scope
}

// penalty records a quota verdict that penalised a scope, and logs it once.
func (tel *telemetry) penalty(ctx context.Context, c *call) {
	v := c.verdict
	kind := scopeKind(v.Scope)
	c.event("throttle.penalty", attribute.String("throttle.scope_kind", kind), attribute.String("throttle.code", v.Code))
	if !tel.disabled {
		tel.penalties.Add(ctx, 1, metric.WithAttributes(
			attribute.String("provider", c.p.Name), attribute.String("scope.kind", kind), attribute.String("code", v.Code)))
	}
	tel.loggedMu.Lock()
	prev, seen := tel.logged[v.Scope]
	fresh := !seen || v.Until.After(prev)
	if fresh {
		if len(tel.logged) > 10_000 {
			tel.logged = make(map[string]time.Time) // bounded: forget old ones
		}
		tel.logged[v.Scope] = v.Until
	}
	tel.loggedMu.Unlock()
	if fresh {
		tel.log.Info("throttle: provider penalised a scope", "provider", c.p.Name, "api", c.route.API,
			"scope", v.Scope, "code", v.Code, "until", v.Until.Format(time.RFC3339Nano))
	}
}

// clampedPenalty logs a penalty longer than its profile's MaxPenalty, once
// per provider and code.
func (tel *telemetry) clampedPenalty(provider, code, source string, until time.Time, limit time.Duration) {
	key := provider + "\x00" + code
	tel.loggedMu.Lock()
	_, seen := tel.clamped[key]
	if !seen {
		if len(tel.clamped) > 1000 {
			tel.clamped = make(map[string]struct{}) // bounded: forget old ones
		}
		tel.clamped[key] = struct{}{}
	}
	tel.loggedMu.Unlock()
	if !seen {
		tel.log.Warn("throttle: penalty longer than the profile's MaxPenalty; clamped", "provider", provider,
			"code", code, "source", source, "until", until.UTC().Format(time.RFC3339), "max_penalty", limit.String())
	}
}

// fallbackSwitch logs and counts a switch to or from the fallback, once per
// switch; addr names the Redis servers.
func (tel *telemetry) fallbackSwitch(down bool, mode, addr string, err error) {
	if !down {
		tel.fallbackOn.Store(0)
		tel.log.Info("throttle: shared limiter answers again; limits are shared again")
		return
	}
	tel.fallbackOn.Store(1)
	if !tel.disabled {
		tel.fallbacks.Add(context.Background(), 1)
	}
	if hint := credentialsHint(err); hint != "" {
		// Not an outage but a setting, which lasts until it is mended:
		// an error, saying what to mend.
		tel.log.Error("throttle: Redis refused this replica's credentials; falling back until they are mended: "+hint,
			"mode", mode, "redis", addr, "error", err)
		return
	}
	tel.log.Warn("throttle: shared limiter unavailable; falling back", "mode", mode, "redis", addr, "error", err)
}

// credentialsHint says what to mend when err is Redis refusing the
// client's credentials or rights, or "" for another failure.
func credentialsHint(err error) string {
	if err == nil {
		return ""
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "NOAUTH") || strings.Contains(msg, "Protocol error: unauthenticated"):
		// The second: a long command (a script) before any AUTH.
		return "the server requires a password: set Password (and Username for an ACL user) in the client's options"
	case strings.Contains(msg, "WRONGPASS") || strings.Contains(msg, "invalid username-password"):
		return "wrong password or user: check Password and Username in the client's options"
	case strings.Contains(msg, "without any password configured"):
		return "the server has no password, but the client gives one: remove Password from the client's options"
	case strings.Contains(msg, "NOPERM"):
		return "the ACL user lacks a command, key or channel the limiter uses: allow it the prefix's keys and channel and the commands the error names"
	}
	return ""
}

// safeErrorText is an error's text for a span status. Our own errors carry
// no credential; others (from the base transport) may quote the URL with its
// access_token, so only their type of failure is kept.
func safeErrorText(err error) string {
	var te *ThrottledError
	var pe *PenaltyError
	switch {
	case errors.As(err, &te):
		return te.Error()
	case errors.As(err, &pe):
		return pe.Error()
	case err == context.Canceled, err == context.DeadlineExceeded:
		return err.Error()
	}
	return "request failed"
}

type spanEvent struct {
	name  string
	at    time.Time
	attrs []attribute.KeyValue
}

// event notes something for the call's span (retries, penalties).
func (c *call) event(name string, attrs ...attribute.KeyValue) {
	c.events = append(c.events, spanEvent{name: name, at: time.Now(), attrs: attrs})
}
