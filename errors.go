package throttle

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/quotaware/throttle/providers"
)

// Sentinel errors, matchable with errors.Is through the *url.Error that
// http.Client wraps around a transport's error.
var (
	// ErrThrottled: the request would have had to wait longer than its
	// budget (the smaller of the context deadline and WithMaxWait) for a
	// slot, or, a token exchange, for another replica's exchange of the
	// same credential. Nothing was sent and nothing was charged (a
	// *ThrottledError).
	ErrThrottled = errors.New("throttle: rate limited")
	// ErrPenalized: the provider penalised a scope of the request (a quota
	// error seen by this or another replica). Nothing was sent (a
	// *PenaltyError).
	ErrPenalized = errors.New("throttle: scope penalized by the provider")
	// ErrLimiterUnavailable: the shared limiter did not answer and the
	// configured fallback is to fail closed (a *LimiterError).
	ErrLimiterUnavailable = errors.New("throttle: limiter unavailable")
)

// ThrottledError reports a request refused because its wait would not fit
// its budget. It matches ErrThrottled.
type ThrottledError struct {
	// Provider is the profile's name ("dingtalk").
	Provider string
	// API is the API as the profile's route names it (Route.API: a
	// catalog template such as "GET /v1.0/contact/users/{unionId}", never
	// an ID the path holds).
	API string
	// Rule is the limit that bound, as rule.Rule.String writes it
	// ("api:<app>:<API>: 20 per 1.05s"), or what held the request when no
	// rule did.
	Rule string
	// RetryAfter is how long until a slot would be free; 0 when none is
	// known (a wait for another replica's token exchange).
	RetryAfter time.Duration
	// Budget is how long the request was allowed to wait.
	Budget time.Duration
}

// Error implements error.
func (e *ThrottledError) Error() string {
	if e.RetryAfter <= 0 {
		// No slot is known: a wait for another replica's token exchange.
		return fmt.Sprintf("throttle: %s %s: rate limited by %s: budget %v",
			e.Provider, e.API, e.Rule, e.Budget.Round(time.Microsecond))
	}
	text := fmt.Sprintf("throttle: %s %s: rate limited by %s: next slot in %v, budget %v",
		e.Provider, e.API, e.Rule, e.RetryAfter.Round(time.Microsecond), e.Budget.Round(time.Microsecond))
	if e.RetryAfter <= waitHintUpTo {
		// A slot within minutes: the caller may rather wait than fail,
		// and the budget is theirs to set.
		text += " (budget: WithMaxWait, or the request's deadline if sooner)"
	}
	return text
}

// waitHintUpTo is the longest wait the error's text says a caller may
// choose to allow: a per-second or per-minute rule's, not an hour's or a
// day's.
const waitHintUpTo = 10 * time.Minute

// Is makes errors.Is(err, ErrThrottled) true.
func (e *ThrottledError) Is(target error) bool { return target == ErrThrottled }

// PenaltyError reports a request refused because the provider penalised one
// of its scopes until Until. It matches ErrPenalized.
type PenaltyError struct {
	// Provider is the profile's name ("dingtalk").
	Provider string
	// API is the API as the profile's route names it (Route.API).
	API string
	// Scope is the penalised scope, "kind:id" (e.g. "egress:default").
	Scope string
	// Until is when the penalty ends, in UTC.
	Until time.Time
	// Code is the provider's error code that caused the penalty.
	Code string
}

// Error implements error.
func (e *PenaltyError) Error() string {
	return fmt.Sprintf("throttle: %s %s: scope %s penalized (code %s) until %s",
		e.Provider, e.API, e.Scope, e.Code, e.Until.Format(time.RFC3339Nano))
}

// Is makes errors.Is(err, ErrPenalized) true.
func (e *PenaltyError) Is(target error) bool { return target == ErrPenalized }

// RetryAfter is how long until the penalty ends, from now; 0 once it is
// over (a request refused while another probed the scope, and whose budget
// ran out waiting for the probe's answer).
func (e *PenaltyError) RetryAfter() time.Duration { return max(time.Until(e.Until), 0) }

// LimiterError reports a request refused because the shared limiter did
// not answer (Redis unreachable, too slow) and the fallback is to fail
// closed. It matches ErrLimiterUnavailable; Err is the limiter's own error.
type LimiterError struct {
	// Provider is the profile's name ("dingtalk").
	Provider string
	// API is the API as the profile's route names it (Route.API).
	API string
	// Err is the limiter's error: for the shared limiter, the Redis it
	// called and what failed (limiter.ErrUnavailable).
	Err error
}

// Error implements error.
func (e *LimiterError) Error() string {
	return fmt.Sprintf("%v: %s %s: %v", ErrLimiterUnavailable, e.Provider, e.API, e.Err)
}

// Is makes errors.Is(err, ErrLimiterUnavailable) true.
func (e *LimiterError) Is(target error) bool { return target == ErrLimiterUnavailable }

// Unwrap returns the limiter's error.
func (e *LimiterError) Unwrap() error { return e.Err }

// retriedError is a refusal by the limiter (or a breaker) that ended a call
// after an earlier attempt failed: it wraps both, so errors.Is finds the
// refusal's sentinel and the earlier failure (a refused connection, say),
// and its text says what happened first.
type retriedError struct {
	refusal  error
	last     error
	attempts int
}

func (e *retriedError) Error() string {
	return fmt.Sprintf("%v (attempt %d; attempt %d failed: %v)", e.refusal, e.attempts, e.attempts-1, e.last)
}

func (e *retriedError) Unwrap() []error { return []error{e.refusal, e.last} }

// answerError stands for a provider's answer that an attempt got and that
// was not the last: when a later attempt is refused by the limiter, the
// error wraps it, as the reason for that attempt.
type answerError struct {
	Provider string
	API      string
	// StatusCode is the answer's HTTP status.
	StatusCode int
	// Kind is how the profile read the answer (transient, quota, ...).
	Kind providers.Kind
	// Code is the provider's error code, if any.
	Code string
}

func (e *answerError) Error() string {
	return fmt.Sprintf("throttle: %s %s: provider answered %d %s (%s, code %s)",
		e.Provider, e.API, e.StatusCode, http.StatusText(e.StatusCode), e.Kind, e.Code)
}

// attemptFailure is why an attempt did not do: its error, or its answer.
func attemptFailure(c *call, resp *http.Response, err error) error {
	if err != nil || resp == nil {
		return err
	}
	return &answerError{Provider: c.p.Name, API: c.route.API, StatusCode: resp.StatusCode, Kind: c.verdict.Kind, Code: c.verdict.Code}
}

// refusal reports an error that says the limiter or a breaker kept the
// attempt from being sent.
func refusal(err error) bool {
	return errors.Is(err, ErrThrottled) || errors.Is(err, ErrPenalized) || errors.Is(err, ErrLimiterUnavailable)
}
