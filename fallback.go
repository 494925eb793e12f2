package throttle

import (
	"time"

	"github.com/quotaware/throttle/limiter"
)

// FallbackMode says what a Transport does while the shared limiter (Redis)
// does not answer.
type FallbackMode int

const (
	// FallbackLocal limits in-process, holding a share of each rule, until
	// Redis answers again. The default.
	FallbackLocal FallbackMode = iota
	// FailClosed refuses every request with ErrLimiterUnavailable.
	FailClosed
	// FailOpen sends every request unlimited.
	FailOpen
)

func (m FallbackMode) String() string {
	switch m {
	case FallbackLocal:
		return "local"
	case FailClosed:
		return "fail-closed"
	case FailOpen:
		return "fail-open"
	}
	return "FallbackMode(?)"
}

// FallbackPolicy configures the behaviour while the shared limiter is away.
type FallbackPolicy struct {
	Mode FallbackMode
	// Share is the fraction of each rule a replica may use on its own, in
	// (0, 1]. Zero means 1 / the number of live replicas, which every
	// Transport on Redis keeps fresh in a small registry.
	Share float64
	// Timeout bounds each limiter call; past it the fallback applies.
	Timeout time.Duration
	// Probe is how often a Transport in fallback asks Redis again.
	Probe time.Duration
	// Recover is how long Redis must answer every probe before the
	// Transport leaves the fallback (zero: 5s), so
	// that a Redis failing on and off does not make it flap; it doubles,
	// up to a minute, while Redis keeps failing soon after coming back.
	Recover time.Duration
}

// DefaultFallbackPolicy: local fallback with the replica's fair share, and
// the timings of limiter.DefaultSharedConfig: a 250ms limiter timeout, Redis
// asked again every second, and used again once it has answered for 5s.
func DefaultFallbackPolicy() FallbackPolicy {
	d := limiter.DefaultSharedConfig()
	return FallbackPolicy{Mode: FallbackLocal, Timeout: d.Timeout, Probe: d.Probe, Recover: d.Recover}
}

// outageMode is the limiter's name for the mode.
func (m FallbackMode) outageMode() limiter.OutageMode {
	switch m {
	case FailClosed:
		return limiter.OutageRefuse
	case FailOpen:
		return limiter.OutageAdmit
	}
	return limiter.OutageLocal
}

// WithFallback sets what happens while Redis does not answer.
func WithFallback(p FallbackPolicy) Option {
	return optionFunc(func(c *config) { c.fallback = p })
}

func (p FallbackPolicy) validate(c *config) {
	switch {
	case p.Mode < FallbackLocal || p.Mode > FailOpen:
		c.fail("WithFallback: Mode must be FallbackLocal, FailClosed or FailOpen, got %d", int(p.Mode))
	case p.Share < 0 || p.Share > 1:
		c.fail("WithFallback: Share must be within (0, 1], or 0 for 1/live replicas; got %v", p.Share)
	case p.Timeout <= 0:
		c.fail("WithFallback: Timeout must be positive, got %v", p.Timeout)
	case p.Probe <= 0:
		c.fail("WithFallback: Probe must be positive, got %v", p.Probe)
	case p.Recover < 0:
		c.fail("WithFallback: Recover must not be negative, got %v", p.Recover)
	}
}
