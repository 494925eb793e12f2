package throttle

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle/apps"
	"github.com/quotaware/throttle/internal/nilness"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/providers"
)

// defaultMaxWait is how long a request may wait for a slot when neither
// WithMaxWait nor the context deadline says less.
const defaultMaxWait = 5 * time.Second

// Option configures a Transport.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// config holds every setting with its default, in one place.
type config struct {
	base      http.RoundTripper
	limiter   limiter.Limiter
	redis     redis.UniversalClient
	limiters  int // how many times WithLimiter was given
	redises   int // how many times WithRedis was given
	profiles  []providers.Profile
	maxWait   time.Duration
	logger    *slog.Logger
	telemetry telemetryConfig
	retry     RetryPolicy
	// retryOn, retryOff: WithRetry, WithoutRetry given. Both is a mistake,
	// which the order of the options used to settle in silence.
	retryOn, retryOff bool
	apps              *apps.Config // WithApps
	noShare           bool         // WithoutSharedTokens (tokens.go)
	errs              []error
}

func defaultConfig() config {
	return config{
		base:    http.DefaultTransport,
		maxWait: defaultMaxWait,
		logger:  slog.Default(),
		retry:   RetryPolicy{}.withDefaults(),
	}
}

func (c *config) fail(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("throttle: "+format, args...))
}

func (c *config) validate() error {
	if c.base == nil {
		c.fail("WithBase: base transport must not be nil")
	}
	if c.maxWait < 0 {
		c.fail("WithMaxWait: must not be negative, got %v", c.maxWait)
	}
	if c.limiter != nil && c.redis != nil {
		c.fail("WithLimiter and WithRedis: give one or the other")
	}
	if c.retryOn && c.retryOff {
		c.fail("WithRetry and WithoutRetry: give one or the other")
	}
	if c.telemetry.disabled && (c.telemetry.tracer != nil || c.telemetry.meter != nil) {
		// The order of the options decided in silence: the provider given
		// was dropped.
		c.fail("WithoutTelemetry and WithTracerProvider or WithMeterProvider: give one or the other")
	}
	if c.limiters > 1 || c.redises > 1 {
		c.fail("WithLimiter or WithRedis given twice: give one limiter (the last one won, and the first went unused)")
	}
	seen := make(map[string]bool)
	for i := range c.profiles {
		p := &c.profiles[i]
		if err := p.Validate(); err != nil {
			c.fail("WithProfiles[%d]: %v", i, err)
			continue
		}
		if seen[p.Name] {
			c.fail("WithProfiles: two profiles named %q", p.Name)
		}
		seen[p.Name] = true
	}
	c.retry.validate(c)
	return errors.Join(c.errs...)
}

// WithBase sets the transport that sends requests (default
// http.DefaultTransport). Its idle connections are never closed by throttle.
func WithBase(rt http.RoundTripper) Option {
	return optionFunc(func(c *config) {
		if nilness.Is(rt) {
			c.fail("WithBase: base transport must not be nil")
			return
		}
		c.base = rt
	})
}

// WithRedis shares the limits and penalties across replicas through Redis
// (a single node, a cluster or a failover client) with the defaults of
// a zero limiter.SharedConfig: key prefix "throttle", a 250ms timeout per
// Redis call, and while Redis does not answer each replica limits alone with
// its share of every rule. It is short for
// WithLimiter(limiter.MustNewShared(client, limiter.SharedConfig{Logger: l}))
// with l the WithLogger logger; build the limiter yourself to set the prefix
// or the outage mode (and set its Logger: it defaults to slog.Default()). Give the client
// ContextTimeoutEnabled: true. Without WithRedis or WithLimiter the
// Transport limits in-process only.
func WithRedis(client redis.UniversalClient) Option {
	return optionFunc(func(c *config) {
		if nilness.Is(client) {
			c.fail("WithRedis: client must not be nil (got %T(nil))", client)
			return
		}
		c.redis = client
		c.redises++
	})
}

// WithLimiter sets the limiter: a *limiter.Shared built with the settings you
// need (prefix, outage mode, timeouts), a limiter.Memory shared by several
// Transports in one process, or one of your own. A *limiter.Shared is wired
// exactly as WithRedis wires the one it builds: other replicas' penalties
// and lifts reach this process's breakers at once, outages and events show
// in the telemetry, and Close closes it (the Transport owns it once New
// succeeds; a New that fails leaves it as it was). A limiter of your own
// that is also a limiter.PenaltyLifter serves LiftPenalty, and one that is
// a limiter.CalendarReader the quota gauges.
func WithLimiter(l limiter.Limiter) Option {
	return optionFunc(func(c *config) {
		if nilness.Is(l) {
			c.fail("WithLimiter: limiter must not be nil (got %T(nil))", l)
			return
		}
		c.limiter = l
		c.limiters++
	})
}

// WithProfiles adds providers the Transport knows (given twice, the lists
// add up; a name given twice is an error). A request goes through the first
// profile whose Match accepts it; other requests pass through untouched.
func WithProfiles(profiles ...providers.Profile) Option {
	return optionFunc(func(c *config) { c.profiles = append(c.profiles, profiles...) })
}

// WithMaxWait caps how long a request may spend waiting (default 5s),
// counted from the start of RoundTrip across every attempt: for its slot,
// for another replica's token exchange, and in a retry's backoff. The
// context deadline, when sooner, caps it further. A request whose slot
// lies beyond what is left fails at once with ErrThrottled. Zero means
// never wait: send now or fail, and no retry that would wait first.
func WithMaxWait(d time.Duration) Option {
	return optionFunc(func(c *config) { c.maxWait = d })
}

// WithLogger sets the logger for penalties, fallbacks and configuration
// warnings (default slog.Default()). Nothing is logged per request at Info.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) {
		if l == nil {
			c.fail("WithLogger: logger must not be nil")
			return
		}
		c.logger = l
	})
}
