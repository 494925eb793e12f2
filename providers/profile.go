package providers

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/quotaware/throttle/limiter/rule"
)

// Profile tells the Transport how to treat one provider's requests: which it
// handles, the rules and penalty scopes of each, and how to read its answers.
// Presets build one from a config (e.g. dingtalk.MustNew(cfg).Profile()); users
// may write their own.
type Profile struct {
	// Name identifies the provider in errors and telemetry, and is the
	// limiter group: every key of the provider shares one Redis hash tag.
	Name string
	// Match reports whether the profile handles the request. The Transport
	// uses the first profile that matches; others pass through untouched.
	Match func(*http.Request) bool
	// Route returns the rules and scopes of a matched request. It may read
	// a bounded prefix of the request body only through PeekRequestBody,
	// which leaves the body, GetBody and ContentLength as they were, and
	// only when a limit of the provider is named in the body.
	Route func(*http.Request) (Route, error)
	// Classify reads the provider's answer to a request Route routed (nil:
	// every answer is OK, so nothing is penalised or learned). It
	// may peek at the body with PeekBody, which leaves the body reading
	// exactly like the original, and names the scope a Quota verdict
	// penalises from the route (Route.Scope) rather than rebuilding it.
	Classify func(*http.Request, *http.Response, *Route) Verdict
	// DefaultPenalty is how long a quota verdict without an end penalises
	// its scope (default 5 minutes).
	DefaultPenalty time.Duration
	// MaxPenalty bounds every penalty of the provider, whatever states it:
	// an answer's body or header, another replica's announcement, or a
	// value read back from Redis. A longer one is clamped to it and logged
	// once (default DefaultMaxPenalty, a calendar month).
	MaxPenalty time.Duration
	// Headroom, when not nil, lets the Transport widen the rules' windows
	// by an allowance measured from latency (see Headroom).
	Headroom *Headroom
	// Jitter, when the rules' windows were widened by a fixed allowance
	// for latency (a preset's Config.Jitter), is that allowance: a request
	// that wakes for its slot later than Jitter (a stalled process) books
	// again rather than crowd the provider's window with the slots after
	// it. Zero: no such check. With Headroom, the measured allowance is
	// used instead.
	Jitter time.Duration
	// Lower, when not nil, applies a limit learned from an answer
	// (Verdict.Learned), by this replica or another: the API's rules are
	// lowered to it until it lapses. It reports whether a rule was lowered
	// (false for a limit already in force); it must never raise one, but
	// for a Learned with App set, which the provider's quota endpoint
	// stated (QuotaCheck).
	Lower func(Learned) bool
	// Heard, when not nil, is told of each penalty of the profile that
	// another replica recorded (announced, or met in the shared limiter)
	// as the Transport stops the scope here, with the end it stops it
	// until. A profile that lengthens the penalty of an error that repeats
	// (WeCom's 45009, DingTalk's 90002) counts it as met here, so that the
	// next repeat climbs the same ladder whichever replica meets it. It
	// must be fast and safe for concurrent use.
	Heard func(scope, code string, until time.Time)
	// QuotaCheck, when not nil, lets the Transport reconcile the profile's
	// calendar quotas with the provider's own count (see QuotaCheck).
	QuotaCheck *QuotaCheck
	// Apps is how many apps the profile tells apart by the app a request
	// is tagged with (throttle.WithApps learns it from the token,
	// throttle.ContextWithApp gives it); the presets set it. With more
	// than one and no WithApps, the Transport warns at New: a request not
	// tagged goes to the quotas of the app the profile falls back on (or
	// of unknown apps), whichever app's token it carries.
	Apps int
}

// Validate reports a profile that cannot be used, naming the field.
func (p *Profile) Validate() error {
	switch {
	case p.Name == "" || len(p.Name) > 64 || strings.ContainsAny(p.Name, "{}"):
		// The name is the limiter's group, inside the braces of its Redis
		// keys' hash tag.
		return fmt.Errorf("providers: Profile.Name must be 1..64 bytes without braces, got %q", p.Name)
	case p.Match == nil:
		return fmt.Errorf("providers: profile %q: Match must not be nil", p.Name)
	case p.Route == nil:
		return fmt.Errorf("providers: profile %q: Route must not be nil", p.Name)
	case p.DefaultPenalty < 0:
		return fmt.Errorf("providers: profile %q: DefaultPenalty must not be negative, got %v", p.Name, p.DefaultPenalty)
	case p.MaxPenalty < 0:
		return fmt.Errorf("providers: profile %q: MaxPenalty must not be negative, got %v", p.Name, p.MaxPenalty)
	case p.Jitter < 0:
		return fmt.Errorf("providers: profile %q: Jitter must not be negative, got %v", p.Name, p.Jitter)
	case p.MaxPenalty > 0 && p.DefaultPenalty > p.MaxPenalty:
		// Every default penalty would be cut to MaxPenalty as it is taken.
		return fmt.Errorf("providers: profile %q: DefaultPenalty (%v) must not exceed MaxPenalty (%v)", p.Name, p.DefaultPenalty, p.MaxPenalty)
	case p.QuotaCheck != nil && p.QuotaCheck.Every < time.Second:
		return fmt.Errorf("providers: profile %q: QuotaCheck.Every must be at least 1s, got %v", p.Name, p.QuotaCheck.Every)
	case p.QuotaCheck != nil && (p.QuotaCheck.Target == nil || p.QuotaCheck.Query == nil || p.QuotaCheck.Read == nil):
		return fmt.Errorf("providers: profile %q: QuotaCheck.Target, Query and Read must not be nil", p.Name)
	}
	return nil
}

// DefaultPenalty applies when neither the answer nor the profile says how
// long a quota error lasts.
const DefaultPenalty = 5 * time.Minute

// Route is what one request is subject to.
type Route struct {
	// API names the provider API the request calls, by its template in
	// the provider's catalog (e.g. "GET /v1.0/contact/users/{unionId}"),
	// or by FoldPath when the provider publishes none: low cardinality,
	// free of IDs, safe for keys, metric attributes and span names.
	API string
	// Uncatalogued is set when the path matched no template of the
	// catalog: the request was routed to the profile's one conservative
	// stand-in API, and the Transport counts it (throttle.requests.uncatalogued)
	// so that an operator sees the catalog is behind.
	Uncatalogued bool
	// Rules are charged together, all or none.
	Rules []rule.Rule
	// Scopes are the penalty scopes the request belongs to, each written
	// "kind:id", e.g. "api:dingabc:/v1.0/contact/users/{unionId}",
	// "app:dingabc", "egress:default". The kind is the profile's to choose
	// and is what telemetry reports of a penalty; the id must hold no
	// secret or token.
	Scopes []string
}

// Scope returns the route's first scope of a kind, or "" when it has none:
// how a Classify names the scope of a Quota verdict without rebuilding it.
func (r *Route) Scope(kind string) string {
	for _, s := range r.Scopes {
		if len(s) > len(kind) && s[len(kind)] == ':' && s[:len(kind)] == kind {
			return s
		}
	}
	return ""
}

// Kind is how a provider's answer must be treated.
type Kind int

const (
	// OK: nothing to do.
	OK Kind = iota
	// Quota: a limit was exceeded; penalise Verdict.Scope until Verdict.Until.
	Quota
	// Transient: the provider is busy or failed; the call may be retried.
	Transient
	// Fatal: an error that no retry mends (bad token, no permission).
	Fatal
)

// String implements fmt.Stringer.
func (k Kind) String() string {
	switch k {
	case OK:
		return "ok"
	case Quota:
		return "quota"
	case Transient:
		return "transient"
	case Fatal:
		return "fatal"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Verdict is a profile's reading of one answer.
type Verdict struct {
	// Kind is what the answer means for the limiter (OK, Quota,
	// Transient, Fatal).
	Kind Kind
	// Scope is the scope a Quota verdict penalises (one of the request's
	// Route.Scopes, or a wider one such as the egress).
	Scope string
	// Until is when the penalty ends; zero means the profile's default.
	Until time.Time
	// Stated marks an Until the provider stated as an instant of its own
	// clock (DingTalk's "处罚将在 … 结束"), where other ends are counted
	// from this replica's: the shared limiter moves those onto Redis's
	// clock by the replica's skew, and must not move a stated one.
	Stated bool
	// RetryAfter is the provider's hint for a Transient verdict, if any.
	RetryAfter time.Duration
	// Code and Message are the provider's error code and message.
	Code    string
	Message string
	// NotProcessed is true when the answer proves the provider did not act
	// on the call (a quota rejection, "system busy"), so even a
	// non-idempotent request may be sent again.
	NotProcessed bool
	// Unbilled is true when the provider bills the refused call against
	// none of its calendar quotas (DingTalk: a call a QPS limit rejected
	// is not billed against the month): the request's calendar slots go
	// back, while its paced and window slots stay spent.
	Unbilled bool
	// Learned is a lower limit the answer states for the API, if any.
	Learned *Learned
	// NoRetry marks an answer that sending the call again would only
	// repeat (a credential refused): its penalty is taken, and the call is
	// not retried, whatever its Kind.
	NoRetry bool
	// Cleared, on an OK answer, says the provider has just reset quotas of
	// its own (WeChat's clear_quota): the Transport ends what it reset
	// before the caller gets the answer, on every replica.
	Cleared *Cleared
}

// Cleared names what a provider's reset of its quotas ended.
type Cleared struct {
	// Scopes are the penalty scopes the reset ended where a penalty of
	// Code holds them (a penalty of another code stands), and so does an
	// answer of Code to a request sent before the reset that arrives
	// after it, at this replica or, with a limiter.ResetRecorder (Redis),
	// any other.
	Scopes []string
	Code   string
	// Rules are the calendar rules whose current window the provider
	// reset: they start again from zero.
	Rules []rule.Rule
}
