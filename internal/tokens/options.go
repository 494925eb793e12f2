package tokens

import (
	"errors"
	"fmt"
	"time"
)

// Option configures a Sharer.
type Option func(*config)

type config struct {
	prefix string
	margin time.Duration
	lease  time.Duration
	poll   time.Duration
	now    func() time.Time
	obs    func(provider, result string)
	gap    time.Duration
	perDay int
	wait   time.Duration
	err    error
}

// WithPrefix sets the prefix of the Redis keys (default "throttle"): keys
// are "<prefix>:token:<hex>" and "<prefix>:token:<hex>:lock".
func WithPrefix(p string) Option {
	return func(c *config) {
		if p == "" {
			c.err = errors.New("tokens: WithPrefix: prefix must not be empty")
		}
		c.prefix = p
	}
}

// WithMargin sets how long before its end a kept token stops being handed
// out (default DefaultMargin, 30 minutes); an answer stated with no more
// is not kept. The next exchange then goes to the provider, so no SDK gets
// a token with less left than it subtracts for its own cache.
func WithMargin(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.err = fmt.Errorf("tokens: WithMargin: margin %v must not be negative", d)
		}
		c.margin = d
	}
}

// WithLease sets how long an exchange in flight holds the others of its
// credential (default 3 s): a replica that dies while fetching delays them
// by no more. It must be at least 10 ms: it is renewed every third of a lease,
// in whole milliseconds.
func WithLease(d time.Duration) Option {
	return func(c *config) {
		if d < minLease {
			c.err = fmt.Errorf("tokens: WithLease: lease %v must be at least %v", d, minLease)
		}
		c.lease = d
	}
}

// minLease is the shortest lease: below it the renewals (every third of a
// lease, PEXPIRE in whole ms) would tick at zero or expire it at once.
const minLease = 10 * time.Millisecond

// WithObserver has f hear every result counted (Fetched, Shared, ...)
// with the provider of the exchange ("dingtalk", "wechat", "wecom",
// "feishu"), for metrics; f must not block.
func WithObserver(f func(provider, result string)) Option {
	return func(c *config) { c.obs = f }
}

// WithHealLimits caps the heals of one credential for the whole fleet: at
// most one in gap and perDay in a day (default 30 s and 20, WeChat's cap on
// a stable_token's forced refreshes); 0 lifts a cap.
func WithHealLimits(gap time.Duration, perDay int) Option {
	return func(c *config) {
		if gap < 0 || perDay < 0 {
			c.err = fmt.Errorf("tokens: WithHealLimits: gap %v and perDay %d must not be negative", gap, perDay)
		}
		c.gap, c.perDay = gap, perDay
	}
}

// WithClock sets the source of time (default time.Now), for tests.
func WithClock(now func() time.Time) Option {
	return func(c *config) {
		if now == nil {
			c.err = errors.New("tokens: WithClock: clock must not be nil")
		}
		c.now = now
	}
}

// WithMaxWait bounds how long an exchange waits for another replica's
// fetch of its credential (default 0: until its context ends); past it,
// the exchange fails with a *WaitError, sending nothing. The Transport
// gives its WithMaxWait.
func WithMaxWait(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.err = fmt.Errorf("tokens: WithMaxWait: %v must not be negative", d)
		}
		c.wait = d
	}
}
