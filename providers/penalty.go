package providers

import (
	"net/http"
	"strings"
	"time"

	"github.com/quotaware/throttle/providers/internal/penaltytime"
)

// DefaultMaxPenalty bounds a profile's penalties when Profile.MaxPenalty is
// zero: the longest penalty a preset documents is a monthly quota that ends
// on the 1st (at most 31 days, plus a grace of under a minute).
const DefaultMaxPenalty = 31*24*time.Hour + time.Minute

// ParseRetryAfter reads an HTTP Retry-After header, either delay-seconds or
// an HTTP-date, and returns how long to wait from now (zero for a date in the
// past). It reports false when the header is absent or malformed, or asks
// for more than a month.
func ParseRetryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if v[0] >= '0' && v[0] <= '9' {
		return penaltytime.ParseSeconds(v)
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	d := t.Sub(now)
	if d < 0 {
		d = 0
	}
	if d > penaltytime.MaxWait {
		return 0, false
	}
	return d, true
}
