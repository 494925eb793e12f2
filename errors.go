package throttle

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors, matchable with errors.Is through the *url.Error that
// http.Client wraps around a transport's error.
var (
	// ErrThrottled: the request would have had to wait longer than its
	// budget (the smaller of the context deadline and WithMaxWait) for a
	// slot. Nothing was sent and nothing was charged.
	ErrThrottled = errors.New("throttle: rate limited")
	// ErrPenalized: the provider penalised a scope of the request (a quota
	// error seen by this or another replica). Nothing was sent.
	ErrPenalized = errors.New("throttle: scope penalized by the provider")
	// ErrLimiterUnavailable: the shared limiter did not answer and the
	// configured fallback is to fail closed.
	ErrLimiterUnavailable = errors.New("throttle: limiter unavailable")
)

// ThrottledError reports a request refused because its wait would not fit
// its budget. It matches ErrThrottled.
type ThrottledError struct {
	Provider string
	// API is the request's folded path.
	API string
	// Rule is the limit that bound ("dingtalk-api:...: 20 per 1.05s").
	Rule string
	// RetryAfter is how long until a slot would be free.
	RetryAfter time.Duration
	// Budget is how long the request was allowed to wait.
	Budget time.Duration
}

func (e *ThrottledError) Error() string {
	return fmt.Sprintf("throttle: %s %s: rate limited by %s: next slot in %v, budget %v",
		e.Provider, e.API, e.Rule, e.RetryAfter.Round(time.Microsecond), e.Budget.Round(time.Microsecond))
}

// Is makes errors.Is(err, ErrThrottled) true.
func (e *ThrottledError) Is(target error) bool { return target == ErrThrottled }

// PenaltyError reports a request refused because the provider penalised one
// of its scopes until Until. It matches ErrPenalized.
type PenaltyError struct {
	Provider string
	API      string
	// Scope is the penalised scope, "kind:id" (e.g. "egress:default").
	Scope string
	Until time.Time
	// Code is the provider's error code that caused the penalty.
	Code string
}

func (e *PenaltyError) Error() string {
	return fmt.Sprintf("throttle: %s %s: scope %s penalized (code %s) until %s",
		e.Provider, e.API, e.Scope, e.Code, e.Until.Format(time.RFC3339Nano))
}

// Is makes errors.Is(err, ErrPenalized) true.
func (e *PenaltyError) Is(target error) bool { return target == ErrPenalized }

// RetryAfter is how long until the penalty ends, from now.
func (e *PenaltyError) RetryAfter() time.Duration { return time.Until(e.Until) }
