package throttle

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"time"

	"github.com/hashicorp/go-retryablehttp"
	"go.opentelemetry.io/otel/attribute"

	"github.com/quotaware/throttle/providers"
)

// RetryPolicy says how often and how patiently a matched request is retried.
// Every attempt takes its own slot from the limiter and passes the breaker,
// so retries never push a provider over its limit.
type RetryPolicy struct {
	// MaxAttempts counts the first attempt: 1 disables retries.
	MaxAttempts int
	// MinBackoff and MaxBackoff bound the exponential backoff (with full
	// jitter) used when the provider gives no hint.
	MinBackoff, MaxBackoff time.Duration
}

// DefaultRetryPolicy: three attempts, backoff between 200ms and 2s. DingTalk
// advises at most three retries of "system busy".
func DefaultRetryPolicy() RetryPolicy {
	return RetryPolicy{MaxAttempts: 3, MinBackoff: 200 * time.Millisecond, MaxBackoff: 2 * time.Second}
}

// WithRetry sets the retry policy (default DefaultRetryPolicy).
//
// What is retried: failures before the request was written; answers that
// prove the provider did not process the call ("system busy", 429, 503, a
// quota penalty that ends within the budget); and, for idempotent methods
// only, ambiguous failures (timeouts after writing, 500, 502, 504). Waits
// follow the provider's hint first (a penalty's end, Retry-After), then
// exponential backoff, and never outlast the request's budget: a hint that
// does not fit ends the call at once with the last answer.
func WithRetry(p RetryPolicy) Option {
	return optionFunc(func(c *config) { c.retry = p })
}

// WithoutRetry sends each request at most once.
func WithoutRetry() Option {
	return optionFunc(func(c *config) { c.retry = RetryPolicy{MaxAttempts: 1} })
}

func (p RetryPolicy) validate(c *config) {
	switch {
	case p.MaxAttempts < 1:
		c.fail("WithRetry: MaxAttempts must be at least 1, got %d", p.MaxAttempts)
	case p.MaxAttempts > 1 && p.MinBackoff <= 0:
		c.fail("WithRetry: MinBackoff must be positive, got %v", p.MinBackoff)
	case p.MaxBackoff < p.MinBackoff:
		c.fail("WithRetry: MaxBackoff (%v) must not be below MinBackoff (%v)", p.MaxBackoff, p.MinBackoff)
	}
}

// retrier drives a call's attempts through go-retryablehttp.
type retrier struct {
	policy RetryPolicy
}

func newRetrier(p RetryPolicy) *retrier {
	if p.MaxAttempts <= 1 {
		return nil
	}
	return &retrier{policy: p}
}

// attemptTransport is the RoundTripper inside the retry client: each
// attempt reserves, waits, sends and classifies. It has no
// CloseIdleConnections method on purpose: go-retryablehttp closes the idle
// connections of its client's transport when it gives up, and the base
// transport's pool belongs to the user.
type attemptTransport struct{ c *call }

func (a attemptTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	a.c.wrote.Store(false)
	return a.c.attempt(req)
}

// do runs the call with retries and records it once.
func (r *retrier) do(req *http.Request, c *call) (*http.Response, error) {
	ctx := req.Context()
	// Observe whether each attempt's request was written: a failure before
	// that is always safe to retry.
	traced := httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) { c.wrote.Store(true) },
	})
	// A shallow copy: the retry client sets the body of the request it
	// sends, and RoundTrip must not modify the caller's request.
	inner := req.WithContext(traced)
	rreq, err := retryablehttp.FromRequest(inner)
	if err != nil {
		closeBody(req)
		return nil, fmt.Errorf("throttle: reading the request body for retries: %w", err)
	}
	closeBody(req)
	client := &retryablehttp.Client{
		HTTPClient: &http.Client{
			Transport: attemptTransport{c},
			// Redirects are the outer client's business.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		RetryMax:     r.policy.MaxAttempts - 1,
		RetryWaitMin: r.policy.MinBackoff,
		RetryWaitMax: r.policy.MaxBackoff,
		CheckRetry: func(_ context.Context, resp *http.Response, err error) (bool, error) {
			return r.check(c, req, resp, unwrapURLError(err)), nil
		},
		Backoff: func(time.Duration, time.Duration, int, *http.Response) time.Duration { return c.nextWait },
		// Keep the last answer, body intact, when retries run out.
		ErrorHandler: retryablehttp.PassthroughErrorHandler,
	}
	resp, err := client.Do(rreq)
	err = unwrapURLError(err)
	if err != nil && resp != nil {
		// The last answer wins over a retry bookkeeping error.
		err = nil
	}
	c.t.tel.finish(ctx, c, resp, err)
	return resp, err
}

// check decides whether the attempt just made should be retried, and how
// long to wait first (c.nextWait).
func (r *retrier) check(c *call, req *http.Request, resp *http.Response, err error) bool {
	ctx := req.Context()
	if ctx.Err() != nil || c.attempts >= r.policy.MaxAttempts {
		return false
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
		case errors.Is(err, ErrThrottled), errors.Is(err, ErrLimiterUnavailable):
			// The caller's own cancellation was caught above; a timeout of
			// the base transport lands below, like any ambiguous failure.
			return false
		case !c.wrote.Load():
			// Failed before the request was written: the provider saw nothing.
		case idempotent(req) && !permanent(err):
			// Ambiguous, but repeating it does no harm.
		default:
			return false
		}
	default:
		v := c.verdict
		switch v.Kind {
		case providers.Quota:
			// The provider rejected the call without processing it.
			hint, haveHint = time.Until(v.Until), true
		case providers.Transient:
			if !v.NotProcessed && !idempotent(req) {
				return false
			}
			if v.RetryAfter > 0 {
				hint, haveHint = v.RetryAfter, true
			} else if d, ok := providers.ParseRetryAfter(resp.Header, time.Now()); ok {
				hint, haveHint = d, true
			}
		default:
			return false
		}
	}
	if !haveHint {
		hint = backoff(r.policy, c.attempts)
	}
	hint = max(hint, 0)
	if hint > c.budget(ctx) {
		return false
	}
	c.nextWait = hint
	c.event("throttle.retry", attribute.Int("throttle.attempt", c.attempts+1),
		attribute.Float64("throttle.backoff_s", hint.Seconds()))
	return true
}

// backoff is exponential with full jitter: a random wait in
// [min, min·2^(attempt-1)], capped at max.
func backoff(p RetryPolicy, attempt int) time.Duration {
	ceil := p.MinBackoff << min(attempt-1, 20)
	if ceil <= 0 || ceil > p.MaxBackoff {
		ceil = p.MaxBackoff
	}
	if ceil <= p.MinBackoff {
		return p.MinBackoff
	}
	return p.MinBackoff + rand.N(ceil-p.MinBackoff)
}

// idempotent: methods whose repetition does no harm (RFC 9110), or a
// request carrying an idempotency key.
func idempotent(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return req.Header.Get("Idempotency-Key") != "" || req.Header.Get("X-Idempotency-Key") != ""
}

// permanent reports failures that another attempt will not mend.
func permanent(err error) bool {
	var cert *tls.CertificateVerificationError
	var uerr *url.Error
	return errors.As(err, &cert) || (errors.As(err, &uerr) && uerr.Op == "parse")
}

// unwrapURLError undoes the *url.Error the retry client's http.Client adds,
// since the caller's http.Client adds its own.
func unwrapURLError(err error) error {
	if ue, ok := err.(*url.Error); ok && ue.Err != nil {
		return ue.Err
	}
	return err
}
