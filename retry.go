package throttle

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"time"

	"github.com/hashicorp/go-retryablehttp"
	"go.opentelemetry.io/otel/attribute"

	"github.com/quotaware/throttle/internal/apipath"
	"github.com/quotaware/throttle/internal/exchanges"
	"github.com/quotaware/throttle/internal/tokenform"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/providers"
)

// RetryPolicy says how often and how patiently a matched request is retried.
// Every attempt takes its own slot from the limiter and passes the breaker,
// so retries never push a provider over its limit.
// A zero field takes its default: the zero RetryPolicy, the Transport's
// default, is three attempts with backoff between 200ms and 2s (DingTalk
// advises at most three retries of "system busy").
type RetryPolicy struct {
	// MaxAttempts counts the first attempt (default 3): 1 disables
	// retries, as WithoutRetry does.
	MaxAttempts int
	// MinBackoff and MaxBackoff bound the exponential backoff (with full
	// jitter) used when the provider gives no hint (defaults 200ms, or
	// MaxBackoff when that is given and shorter, and 2s, or MinBackoff
	// when that is longer).
	MinBackoff, MaxBackoff time.Duration
}

// withDefaults fills in the zero fields.
func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.MaxAttempts == 0 {
		p.MaxAttempts = 3
	}
	if p.MinBackoff == 0 {
		// Not above a MaxBackoff given alone: MaxBackoff 100ms failed
		// with "must not be below MinBackoff (200ms)", a value never given.
		p.MinBackoff = 200 * time.Millisecond
		if p.MaxBackoff > 0 {
			p.MinBackoff = min(p.MinBackoff, p.MaxBackoff)
		}
	}
	if p.MaxBackoff == 0 {
		p.MaxBackoff = max(2*time.Second, p.MinBackoff)
	}
	return p
}

// WithRetry sets the retry policy; without it, the zero RetryPolicy's
// defaults apply.
//
// What is retried, whatever the method: failures before the request was
// written (known when the base transport reports its connection through
// httptrace, as net/http's does; with a base that does not, such a failure
// counts as ambiguous), and answers the profile reads as proof that the provider did not
// process the call (Verdict.NotProcessed: "system busy" (-1), 429, a proxy's
// 403/429 page in front of DingTalk, a quota penalty that ends within the
// budget). For idempotent methods only (GET, HEAD, OPTIONS, TRACE, PUT,
// DELETE, but not WeChat's GET /cgi-bin/token, each call of which issues a
// new token; or a request with an Idempotency-Key header, which is the
// caller's promise that a repeat does no harm: none of the four providers
// deduplicates by it, so set it only where something does): ambiguous failures,
// which are timeouts after the request was written and every 5xx answer,
// 503 included: the presets cannot tell whether a gateway's 5xx came before
// or after the API acted, so a POST that gets one (a message sent twice) is
// returned, not repeated. Waits follow the provider's hint first (a
// penalty's end, Retry-After), then exponential backoff, and never outlast
// the request's budget: a hint that does not fit ends the call at once with
// the last answer.
//
// Each attempt sends the body again from the request's GetBody, which
// http.NewRequest sets for a *bytes.Buffer, *bytes.Reader or
// *strings.Reader; a body without GetBody is copied when it is at most
// 1 MiB, and a longer one is streamed once and never retried (the call's
// span then carries a throttle.retry_skipped event). When the
// last attempt is refused by the limiter after earlier ones failed, the
// error wraps both: errors.Is finds ErrThrottled (or ErrPenalized) and the
// earlier failure.
func WithRetry(p RetryPolicy) Option {
	return optionFunc(func(c *config) { c.retry, c.retryOn = p.withDefaults(), true })
}

// WithoutRetry sends each request at most once.
func WithoutRetry() Option {
	return optionFunc(func(c *config) { c.retry, c.retryOff = RetryPolicy{MaxAttempts: 1}, true })
}

func (p RetryPolicy) validate(c *config) {
	switch {
	case p.MaxAttempts < 1:
		c.fail("WithRetry: MaxAttempts must be at least 1 (or zero for the default), got %d", p.MaxAttempts)
	case p.MaxAttempts > 1 && p.MinBackoff <= 0:
		c.fail("WithRetry: MinBackoff must be positive (or zero for the default), got %v", p.MinBackoff)
	case p.MaxBackoff < p.MinBackoff:
		c.fail("WithRetry: MaxBackoff (%v) must not be below MinBackoff (%v)", p.MaxBackoff, p.MinBackoff)
	}
}

// retrier runs a call's attempts in a loop; go-retryablehttp's policy
// decides which transport failures are worth another attempt.
type retrier struct {
	policy RetryPolicy
}

func newRetrier(p RetryPolicy) *retrier {
	if p.MaxAttempts <= 1 {
		return nil
	}
	return &retrier{policy: p}
}

// maxRetryBody bounds the body of a request without GetBody that is kept in
// memory to be sent again. A request built by http.NewRequest with a
// bytes.Buffer, bytes.Reader or strings.Reader has GetBody and is never
// copied; a longer body without it is streamed once, never retried.
const maxRetryBody = 1 << 20

// discardLimit bounds how much of an answer that is not returned is read,
// so its connection can be reused.
const discardLimit = 4 << 10

// do runs the call's attempts and records it once. Each attempt is a fresh
// shallow copy of req with the body rewound.
func (r *retrier) do(req *http.Request, c *call) (*http.Response, error) {
	ctx := req.Context()
	body, rewind, err := retryBody(req)
	if err != nil {
		c.outcome = outcomeTransportError
		c.t.tel.finish(ctx, c, nil, err)
		return nil, err
	}
	// Observe whether each attempt's request was written: a failure before
	// that is always safe to retry. Only a base transport that reports its
	// work (GetConn, as net/http's does) can say it did not write: with one
	// that reports nothing (a wrapper, an HTTP/3 client), a failure counts
	// as after the write. An idempotent request is retried after an
	// ambiguous failure either way, so it goes without the trace (three
	// allocations a call).
	traced := ctx
	if !idempotent(req) {
		traced, c.tracing = c.traceWrites(ctx), true
	}
	var (
		resp *http.Response
		prev error // why the attempt before the last did not do
	)
	for {
		areq := req.WithContext(traced) // RoundTrip must not modify req
		areq.Body = body
		c.wrote.Store(false)
		c.traced.Store(false)
		resp, err = c.attempt(areq)
		wait, again := r.check(c, req, resp, err)
		if again && rewind == nil && body != nil && body != http.NoBody {
			// A long body without GetBody is sent once: say so on the
			// span, or a retry the caller counted on vanishes silently.
			again = false
			c.event("throttle.retry_skipped", attribute.String("throttle.reason", "body over 1 MiB without GetBody"))
		}
		if again {
			next, rerr := rewind()
			if rerr != nil {
				again = false // keep this attempt's result: it is the last
				c.event("throttle.retry_skipped", attribute.String("throttle.reason", "GetBody failed"))
			}
			body = next
		}
		if !again {
			break
		}
		// Recorded once the retry is sure: check's yes may still be undone
		// by a body that cannot be sent again.
		c.event("throttle.retry", attribute.Int("throttle.attempt", c.attempts+1),
			attribute.Float64("throttle.backoff_s", wait.Seconds()))
		prev = attemptFailure(c, resp, err)
		discard(resp)
		if err := sleepCtx(ctx, wait); err != nil {
			if body != nil {
				body.Close()
			}
			c.outcome = outcomeCancelled
			c.t.tel.finish(ctx, c, nil, err)
			return nil, err
		}
	}
	if err != nil && prev != nil && refusal(err) {
		err = &retriedError{refusal: err, last: prev, attempts: c.attempts}
	}
	c.t.tel.finish(ctx, c, resp, err)
	return resp, err
}

// retryBody returns the body of the first attempt and how to get the body
// of the next one: GetBody when the request has it; otherwise a copy of a
// body up to maxRetryBody, read now; for a longer body, none (the request
// is then sent once, its body streamed). A request without a body needs no
// rewinding.
func retryBody(req *http.Request) (io.ReadCloser, func() (io.ReadCloser, error), error) {
	switch {
	case req.Body == nil || req.Body == http.NoBody:
		return req.Body, func() (io.ReadCloser, error) { return req.Body, nil }, nil
	case req.GetBody != nil:
		return req.Body, req.GetBody, nil
	case req.ContentLength > maxRetryBody:
		// Says it is too long to keep: streamed once, with no copy of
		// its first part (an upload of 20 MiB cost 2 MiB a request).
		return req.Body, nil, nil
	}
	buf, err := io.ReadAll(io.LimitReader(req.Body, maxRetryBody+1))
	if err != nil {
		req.Body.Close()
		return nil, nil, fmt.Errorf("throttle: reading the request body: %w", err)
	}
	if len(buf) > maxRetryBody {
		// Too long to keep: stream it once, the part read first.
		return struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(buf), req.Body), req.Body}, nil, nil
	}
	req.Body.Close()
	rewind := func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf)), nil }
	first, _ := rewind()
	return first, rewind, nil
}

// discard drains a little of an answer that is not returned, so that its
// connection can be reused, and closes it.
func discard(resp *http.Response) {
	if resp == nil || resp.Body == nil {
		// A base RoundTripper may answer with no body when there is none
		// (net/http.Client accepts it).
		return
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, discardLimit))
	resp.Body.Close()
}

// check decides whether the attempt just made should be retried, and how
// long to wait first.
func (r *retrier) check(c *call, req *http.Request, resp *http.Response, err error) (time.Duration, bool) {
	ctx := req.Context()
	if ctx.Err() != nil || c.attempts >= r.policy.MaxAttempts {
		return 0, false
	}
	var hint time.Duration
	haveHint := false
	switch {
	case err != nil:
		var pe *PenaltyError
		switch {
		case errors.As(err, &pe):
			// Nothing was sent; worth waiting only if the penalty ends
			// within the budget. A penalty already over means another
			// request is probing the scope: back off and ask again.
			if left := time.Until(pe.Until); left > 0 {
				hint, haveHint = left, true
			}
		case errors.Is(err, ErrThrottled), errors.Is(err, ErrLimiterUnavailable), errors.Is(err, limiter.ErrInvalidRequest):
			// The caller's own cancellation was caught above; a timeout of
			// the base transport lands below, like any ambiguous failure.
			// A route the limiter refuses as invalid is its config's
			// fault: asking again gets the same answer.
			return 0, false
		case permanent(ctx, req, err):
			return 0, false
		case c.traced.Load() && !c.wrote.Load():
			// Failed before the request was written: the provider saw nothing.
		case idempotent(req):
			// Ambiguous, but repeating it does no harm.
		default:
			return 0, false
		}
	default:
		v := c.verdict
		if v.NoRetry {
			return 0, false
		}
		switch v.Kind {
		case providers.Quota:
			// The provider rejected the call without processing it (the
			// presets' every quota verdict says so; a custom profile's
			// that does not is resent only when idempotent). A verdict
			// that stops nothing (no scope, no end: a custom profile's)
			// backs off as a transient failure does, rather than
			// resending at once.
			if !v.NotProcessed && !idempotent(req) {
				return 0, false
			}
			if !v.Until.IsZero() {
				hint, haveHint = time.Until(v.Until), true
			}
		case providers.Transient:
			if !v.NotProcessed && !idempotent(req) {
				return 0, false
			}
			if v.RetryAfter > 0 {
				hint, haveHint = v.RetryAfter, true
			} else if d, ok := providers.ParseRetryAfter(resp.Header, time.Now()); ok {
				hint, haveHint = d, true
			}
		default:
			return 0, false
		}
	}
	if !haveHint {
		hint = backoff(r.policy, c.attempts)
	}
	hint = max(hint, 0)
	if hint > c.budget(ctx) {
		return 0, false
	}
	return hint, true
}

// backoff is exponential with jitter: a random wait in [min, min·2^attempt],
// capped at max. The first retry is spread as well: callers failed by one
// event (an HTTP/2 connection reset, a 503 blip) would otherwise all ask
// again at min, one burst for Redis and for a window rule.
func backoff(p RetryPolicy, attempt int) time.Duration {
	ceil := p.MinBackoff << min(attempt, 20)
	if ceil <= 0 || ceil > p.MaxBackoff {
		ceil = p.MaxBackoff
	}
	if ceil <= p.MinBackoff {
		return p.MinBackoff
	}
	return p.MinBackoff + rand.N(ceil-p.MinBackoff)
}

// idempotent: methods whose repetition does no harm (RFC 9110), but for a
// token exchange that rotates its token; or a request carrying an
// idempotency key, the caller's promise (as net/http reads it too: no
// provider of the presets deduplicates by it). RoundTrip has read an empty
// Method as GET already.
func idempotent(req *http.Request) bool {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return req.URL == nil || !exchanges.Rotates(req.Method, apipath.Sent(req.URL))
	}
	return tokenform.Header(req.Header, "Idempotency-Key") != "" || tokenform.Header(req.Header, "X-Idempotency-Key") != ""
}

// permanent reports failures that another attempt will not mend: those
// go-retryablehttp's policy gives up on (a certificate that does not
// verify, an unsupported scheme, an invalid header), and a URL that does
// not parse.
func permanent(ctx context.Context, req *http.Request, err error) bool {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		if uerr.Op == "parse" {
			return true
		}
	} else {
		// The policy reads the failure the way http.Client reports it.
		uerr = &url.Error{Op: req.Method, URL: req.URL.Redacted(), Err: err}
	}
	retry, _ := retryablehttp.DefaultRetryPolicy(ctx, nil, uerr)
	return !retry
}
