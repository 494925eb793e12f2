package apps

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/quotaware/throttle/internal/hostcheck"
	"github.com/quotaware/throttle/internal/nilness"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"
)

// Config configures a Book. The zero value is a Book that knows only the
// exchanges this process sees; Redis and Key share it with every replica.
// Through throttle.WithApps, the Transport fills Redis (and then Prefix),
// MeterProvider and Logger with its own when they are zero, so a Transport
// on Redis needs only Key.
type Config struct {
	// Redis shares what the Book learns with every replica. It needs Key.
	Redis redis.UniversalClient
	// Key is the HMAC key tokens are hashed with before they name a Redis
	// key: the same on every replica, at least 16 bytes of secret
	// randomness (keep it with the apps' secrets). Required with Redis;
	// without Redis a random key is used.
	Key []byte
	// Prefix of the Book's Redis keys, "<prefix>:app:<hash>" (default
	// "throttle", the Transport's).
	Prefix string
	// NegativeTTL is how long an unknown token is remembered as unknown
	// (default 2 s): the longest a replica may charge a token another
	// replica just learned to the default app, and the least time between
	// two Redis calls for one unknown token.
	NegativeTTL time.Duration
	// RedisTimeout bounds each Redis call (default 500 ms); a lookup that
	// times out or fails leaves the request untagged, and its token unknown
	// for 250 ms (not NegativeTTL: a slow moment should not send the
	// token's calls to the wrong app for long).
	RedisTimeout time.Duration
	// MaxTokens bounds how many tokens the local cache holds (default
	// 1,048,576, about 60 MB at most).
	MaxTokens int
	// Hosts adds, per provider ("dingtalk", "wechat", "wecom", "feishu":
	// each preset's Name), hosts whose token exchanges the Book learns from
	// when it observes them outside a Transport's profile (Observe
	// wrapping a client's transport; a private gateway, an emulator). Each
	// host is "host" (any port) or "host:port". The providers' public hosts
	// are always accepted; through the Transport, an exchange the
	// provider's profile matched is accepted whatever its host.
	Hosts map[string][]string
	// MeterProvider records the Book's counters (default: the global
	// provider). Counters carry the provider name, never a token or an app.
	MeterProvider metric.MeterProvider
	// Logger is where the Book reports what an operator must act on
	// (default slog.Default()): replicas whose keys differ, a token claimed
	// for two apps. Never a token, a secret or a hash of one.
	Logger *slog.Logger

	now func() time.Time // entries expire by it (default time.Now); tests set it
}

// config is a Config with its defaults filled in and checked.
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
}

// resolve fills in the defaults of the zero fields and checks the others,
// naming the field at fault.
func (c Config) resolve() (config, error) {
	r := config{
		rdb: c.Redis, key: append([]byte(nil), c.Key...), prefix: c.Prefix,
		negativeTTL: c.NegativeTTL, redisTimeout: c.RedisTimeout, maxTokens: c.MaxTokens,
		meter: c.MeterProvider, now: c.now, logger: c.Logger, hosts: defaultHosts(),
	}
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf("apps: Config."+format, args...)) }
	switch {
	case c.Redis != nil && nilness.Is(c.Redis):
		fail("Redis: a nil %T; leave the field unset for a Book without Redis", c.Redis)
	case c.Redis != nil && len(c.Key) == 0:
		fail("Key: required with Redis (every replica hashes tokens with the same key)")
	case len(c.Key) > 0 && len(c.Key) < minKeyLen:
		fail("Key: must be at least %d bytes, got %d", minKeyLen, len(c.Key))
	}
	if r.prefix == "" {
		r.prefix = "throttle"
	}
	if c.NegativeTTL < 0 {
		fail("NegativeTTL: must not be negative, got %v", c.NegativeTTL)
	} else if c.NegativeTTL == 0 {
		r.negativeTTL = defaultNegativeTTL
	}
	if c.RedisTimeout < 0 {
		fail("RedisTimeout: must not be negative, got %v", c.RedisTimeout)
	} else if c.RedisTimeout == 0 {
		r.redisTimeout = defaultRedisTimeout
	}
	if c.MaxTokens < 0 {
		fail("MaxTokens: must not be negative, got %d", c.MaxTokens)
	} else if c.MaxTokens == 0 {
		r.maxTokens = defaultMaxTokens
	}
	if r.now == nil {
		r.now = time.Now
	}
	if r.logger == nil {
		r.logger = slog.Default()
	}
	for provider, hosts := range c.Hosts {
		if _, ok := r.hosts[provider]; !ok {
			fail("Hosts: provider must be one of %q, %q, %q, %q; got %q", nameDingTalk, nameWeChat, nameWeCom, nameFeishu, provider)
			continue
		}
		if err := hostcheck.All(fmt.Sprintf("Hosts[%q]", provider), provider, hosts); err != nil {
			fail("%v", err)
			continue
		}
		for _, h := range hosts {
			r.hosts[provider] = append(r.hosts[provider], strings.ToLower(h))
		}
	}
	return r, errors.Join(errs...)
}
