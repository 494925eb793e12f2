package apps

import "time"

// WithTestClock returns c with the clock entries expire by set to now.
func WithTestClock(c Config, now func() time.Time) Config {
	c.now = now
	return c
}

// MaxTTL is maxTTL, for tests.
const MaxTTL = maxTTL

// DefaultHosts returns the public hosts whose exchanges a Book learns from
// for provider without a profile's word.
func DefaultHosts(provider string) []string { return defaultHosts()[provider] }
