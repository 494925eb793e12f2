package throttle

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/quotaware/throttle/internal/exchanges"
	"github.com/quotaware/throttle/internal/tokens"
)

// WithoutSharedTokens turns off the sharing of token exchanges between
// replicas, which a Transport with Redis does by default: each replica's
// SDKs then fetch their own access tokens, as without the Transport.
//
// With Redis (WithRedis, or a *limiter.Shared given to WithLimiter), the Transport answers a token exchange (DingTalk
// gettoken and /v1.0/oauth2 tokens, WeChat /cgi-bin/token and stable_token,
// WeCom gettoken and the suite's tokens, Feishu tenant and app tokens) from
// the answer another replica fetched for the same credential, kept in
// Redis encrypted under keys only holders of that credential can derive,
// with its lifetime counted down; concurrent exchanges wait for the one in
// flight; a token the provider calls invalid is dropped once for the fleet,
// and the requests that still carry it to a host that refused it go with the
// token the fleet keeps now for the same credential (a copy of the request;
// throttle.tokens.replaced counts them). WithoutSharedTokens turns all of it
// off. The README's "Tokens across replicas" says more.
func WithoutSharedTokens() Option {
	return optionFunc(func(c *config) { c.noShare = true })
}

// shareTokens wraps t.base with the exchange sharing of package tokens when
// the Transport has a shared limiter on Redis (from WithRedis or given with
// WithLimiter) and sharing is not turned off; it uses the limiter's client
// and key prefix. It sits under the app learning (apps.Book.Observe), which
// so learns from the answers fetched for the fleet; RoundTrip answers the
// exchanges whose answer is kept before the limiter (storedExchange).
func (t *Transport) shareTokens(c *config) {
	if t.shared == nil || c.noShare {
		return
	}
	s, err := tokens.New(t.shared.Client(), tokens.WithPrefix(t.shared.Config().Prefix),
		// WithMaxWait(0) is "never wait": at once, where the Sharer's 0
		// would be no bound.
		tokens.WithObserver(cappedHealLog(c.logger, t.tokenMetric())), tokens.WithMaxWait(max(t.maxWait, time.Nanosecond)))
	if err != nil {
		// Only a bad option fails New, and these are valid: exchange
		// alone rather than fail the Transport.
		return
	}
	t.tokens = s
	t.base = s.Wrap(t.base)
}

// cappedHealLog returns next (which may be nil) with a warning, at most
// once a minute per provider, for each heal the caps refuse. Heals of one
// credential run into their caps (one in 30 s, 20 a day) only when tokens
// of it keep being invalidated from outside the fleet's sharing, and past
// the day's cap every call with the dead token is refused by the provider
// until its kept answer ends (up to 1 h 30 min for WeChat): the operator
// needs the likely causes, not just a counter.
func cappedHealLog(log *slog.Logger, next func(provider, result string)) func(provider, result string) {
	var mu sync.Mutex
	last := map[string]time.Time{}
	return func(provider, result string) {
		if next != nil {
			next(provider, result)
		}
		if result != tokens.Capped {
			return
		}
		mu.Lock()
		now := time.Now()
		due := now.Sub(last[provider]) >= time.Minute
		if due {
			last[provider] = now
		}
		mu.Unlock()
		if due {
			log.Warn("throttle: a token the provider refused stays shared: heals of its credential are capped (one in 30 s, 20 a day). "+
				"Something outside this fleet's shared tokens keeps fetching tokens for it, invalidating the fleet's: "+
				"replicas with another limiter Prefix, with WithoutSharedTokens or of an older release, or another service with the same credential",
				"provider", provider)
		}
	}
}

// tokenMetric returns what counts the shared exchanges in the metric
// throttle.tokens.exchanges{provider, result}, and the requests sent with
// the fleet's token in place of a refused one in
// throttle.tokens.replaced{provider}, or nil without telemetry. The
// exchanges' attributes are the provider and the result (fetched, shared,
// waited, healed, capped, unshared), the replacements' the provider alone:
// never a token, a secret or an app.
func (t *Transport) tokenMetric() func(provider, result string) {
	if t.tel.disabled {
		return nil
	}
	meter := t.tel.meterProvider.Meter(instrumentationName)
	exchanged, err := meter.Int64Counter("throttle.tokens.exchanges",
		metric.WithUnit("{exchange}"),
		metric.WithDescription("Token exchanges shared by the fleet through Redis, by result: fetched (sent to the provider, answer kept), "+
			"shared (answered from Redis), waited (for another replica's fetch), healed (a kept token the provider refused, dropped), "+
			"capped (a heal refused: one per credential in 30 s, 20 a day), unshared (sent alone: Redis failed, or not kept: its lease lapsed)."))
	t.tel.report(err)
	if err != nil {
		return nil
	}
	replaced, err := meter.Int64Counter("throttle.tokens.replaced",
		metric.WithUnit("{request}"),
		metric.WithDescription("Requests carrying a token the provider had refused, sent with the token the fleet keeps now for the same credential."))
	t.tel.report(err)
	if err != nil {
		return nil
	}
	type key struct{ provider, result string }
	sets := map[key]metric.MeasurementOption{}
	for _, p := range exchanges.Providers {
		for _, r := range tokens.Results {
			attrs := []attribute.KeyValue{attribute.String("provider", p)}
			if r != tokens.Replaced {
				attrs = append(attrs, attribute.String("result", r))
			}
			sets[key{p, r}] = metric.WithAttributeSet(attribute.NewSet(attrs...))
		}
	}
	return func(provider, result string) {
		set, ok := sets[key{provider, result}]
		switch {
		case !ok:
		case result == tokens.Replaced:
			replaced.Add(context.Background(), 1, set)
		default:
			exchanged.Add(context.Background(), 1, set)
		}
	}
}

// storedExchange answers a token exchange the profile p matched from the
// answer another replica fetched, kept in Redis, before the limiter: only
// exchanges sent to the provider take a slot of the exchange's rules. resp
// is nil when the request is to be sent on, as sent (req, or a copy whose
// body replays what was read); err when the caller gave up while an
// exchange in flight was awaited, or a *tokens.WaitError once that wait
// passed WithMaxWait (RoundTrip makes it a ThrottledError).
func (t *Transport) storedExchange(req *http.Request, p *profile) (resp *http.Response, sent *http.Request, err error) {
	if t.tel.fallbackOn.Load() == 1 {
		// The limiter finds Redis down: no call before it. The base's
		// exchange still asks Redis, each call bounded (250 ms), and
		// sends it as it came when Redis does not answer.
		return nil, req, nil
	}
	resp, sent, err = t.tokens.Stored(req, p.Name)
	if err != nil {
		return nil, sent, err
	}
	if resp == nil || t.apps == nil {
		return resp, sent, err
	}
	// The app book learns from a shared answer as from one it saw fetched
	// (Resolve marks the exchange as sent to the provider's profile).
	resp, err = t.apps.Observe(answered{resp}).RoundTrip(t.apps.Resolve(sent, p.Name))
	return resp, sent, err
}

// answered is a RoundTripper whose answer is already known.
type answered struct{ resp *http.Response }

func (a answered) RoundTrip(*http.Request) (*http.Response, error) { return a.resp, nil }

// exchangeWaitError turns an exchange's wait for another replica's fetch of
// its credential, which outlasted the request's wait budget (WithMaxWait),
// into the ThrottledError of any wait that does not fit: nothing was sent,
// and a retry policy does not repeat it. Other errors are returned as
// they are.
func (t *Transport) exchangeWaitError(provider, api string, err error) error {
	var we *tokens.WaitError
	if !errors.As(err, &we) {
		return err
	}
	return &ThrottledError{Provider: provider, API: api, Rule: "another replica's exchange of the credential, in flight",
		Budget: t.maxWait}
}

// exchangeNotSent ends a token exchange that gave up waiting for another
// replica's fetch of its credential, before the limiter: throttled past
// its budget (exchangeWaitError), or cancelled. It counts in
// throttle.requests and has a span as any refused request does. (An
// exchange answered from Redis is counted by throttle.tokens.exchanges
// alone: it reached no provider.)
func (t *Transport) exchangeNotSent(p *profile, req *http.Request, start time.Time, err error) error {
	c := &call{t: t, p: p, start: start, outcome: outcomeCancelled}
	// The API as a route names it (a template, never an ID such as
	// DingTalk's corpId in /v1.0/oauth2/{corpId}/token); the body was read
	// already, so a route that needs it names none.
	if rt, rerr := p.Route(req); rerr == nil {
		c.route.API = rt.API
	}
	err = t.exchangeWaitError(p.Name, c.route.API, err)
	if errors.Is(err, ErrThrottled) {
		c.outcome = outcomeThrottled
	}
	t.tel.finish(req.Context(), c, nil, err)
	return err
}
