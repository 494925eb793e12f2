package apps

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"
)

// Option configures a Book.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	rdb          redis.UniversalClient
	key          []byte
	prefix       string
	negativeTTL  time.Duration
	redisTimeout time.Duration
	maxTokens    int
	meter        metric.MeterProvider
	now          func() time.Time
	logger       *slog.Logger
	hosts        map[string][]string // provider -> hosts its exchanges are learned from
	errs         []error
}

func defaultConfig() config {
	return config{
		prefix:       "throttle",
		negativeTTL:  defaultNegativeTTL,
		redisTimeout: defaultRedisTimeout,
		maxTokens:    defaultMaxTokens,
		now:          time.Now,
		hosts:        defaultHosts(),
	}
}

// WithRedis shares what the Book learns with every replica through rdb.
// key is the HMAC key tokens are hashed with before they name a Redis key:
// every replica must use the same key, at least 16 bytes of secret
// randomness (keep it with the apps' secrets). Without WithRedis, each
// replica knows only the exchanges it saw itself.
func WithRedis(rdb redis.UniversalClient, key []byte) Option {
	return optionFunc(func(c *config) {
		if rdb == nil {
			c.errs = append(c.errs, errors.New("apps: WithRedis: client must not be nil"))
		}
		if len(key) < minKeyLen {
			c.errs = append(c.errs, fmt.Errorf("apps: WithRedis: key must be at least %d bytes, got %d", minKeyLen, len(key)))
		}
		c.rdb, c.key = rdb, append([]byte(nil), key...)
	})
}

// WithPrefix sets the prefix of the Book's Redis keys (default "throttle",
// the Transport's): keys are "<prefix>:app:<hash>".
func WithPrefix(p string) Option {
	return optionFunc(func(c *config) {
		if p == "" {
			c.errs = append(c.errs, errors.New("apps: WithPrefix: prefix must not be empty"))
		}
		c.prefix = p
	})
}

// WithNegativeTTL sets how long an unknown token is remembered as unknown
// (default 2 s): the longest a replica may charge a token another replica
// just learned to the default app, and the least time between two Redis
// calls for one unknown token.
func WithNegativeTTL(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d <= 0 {
			c.errs = append(c.errs, fmt.Errorf("apps: WithNegativeTTL: must be positive, got %v", d))
		}
		c.negativeTTL = d
	})
}

// WithRedisTimeout bounds each Redis call (default 500 ms); a lookup that
// times out leaves the request untagged, and its token unknown for the
// negative TTL.
func WithRedisTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d <= 0 {
			c.errs = append(c.errs, fmt.Errorf("apps: WithRedisTimeout: must be positive, got %v", d))
		}
		c.redisTimeout = d
	})
}

// WithMaxTokens bounds how many tokens the local cache holds (default
// 1,048,576, about 60 MB at most).
func WithMaxTokens(n int) Option {
	return optionFunc(func(c *config) {
		if n < 1 {
			c.errs = append(c.errs, fmt.Errorf("apps: WithMaxTokens: must be positive, got %d", n))
		}
		c.maxTokens = n
	})
}

// WithMeterProvider records the Book's counters there (default: the global
// provider). Counters carry the provider name, never a token or an app.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) { c.meter = mp })
}

// WithClock sets the clock entries expire by (default time.Now), for tests.
func WithClock(now func() time.Time) Option {
	return optionFunc(func(c *config) { c.now = now })
}

// WithLogger sets where the Book reports what an operator must act on
// (default slog.Default()): replicas whose keys differ, a token claimed for
// two apps. Never a token, a secret or a hash of one.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) {
		if l == nil {
			c.errs = append(c.errs, errors.New("apps: WithLogger: logger must not be nil"))
		}
		c.logger = l
	})
}

// WithHosts adds hosts whose token exchanges the Book learns from when it
// observes them outside a Transport's profile (Observe wrapping a client's
// transport; a private gateway, an emulator), for provider ("dingtalk",
// "wechat", "wecom", "feishu"). Each host is "host" (any port) or
// "host:port". The providers' public hosts are always accepted; through
// the Transport, an exchange the provider's profile matched is accepted
// whatever its host.
func WithHosts(provider string, hosts ...string) Option {
	return optionFunc(func(c *config) {
		if _, ok := c.hosts[provider]; !ok {
			c.errs = append(c.errs, fmt.Errorf("apps: WithHosts: provider must be one of %q, %q, %q, %q; got %q",
				DingTalk, WeChat, WeCom, Feishu, provider))
			return
		}
		if len(hosts) == 0 {
			c.errs = append(c.errs, fmt.Errorf("apps: WithHosts(%q): no host given", provider))
		}
		for _, h := range hosts {
			if h == "" || strings.ContainsAny(h, "/ ?#@") {
				c.errs = append(c.errs, fmt.Errorf("apps: WithHosts(%q): host %q is not a host or host:port", provider, h))
				continue
			}
			c.hosts[provider] = append(c.hosts[provider], strings.ToLower(h))
		}
	})
}
