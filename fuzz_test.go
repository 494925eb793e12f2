package throttle_test

import (
	"testing"
	"time"

	"github.com/quotaware/throttle"
)

// Arbitrary option values build a Transport or fail with an error naming the
// option; nothing panics.
func FuzzBuild(f *testing.F) {
	f.Add(int64(time.Second), 3, int64(time.Millisecond), int64(time.Second), 0.5, 0, int64(time.Second), int64(time.Second))
	f.Add(int64(-1), 0, int64(0), int64(0), -1.0, 7, int64(0), int64(-5))
	f.Fuzz(func(t *testing.T, maxWait int64, attempts int, minB, maxB int64, share float64, mode int, timeout, probe int64) {
		tr, err := throttle.Build(
			throttle.WithMaxWait(time.Duration(maxWait)),
			throttle.WithRetry(throttle.RetryPolicy{MaxAttempts: attempts, MinBackoff: time.Duration(minB), MaxBackoff: time.Duration(maxB)}),
			throttle.WithFallback(throttle.FallbackPolicy{Mode: throttle.FallbackMode(mode), Share: share,
				Timeout: time.Duration(timeout), Probe: time.Duration(probe)}),
			throttle.WithoutTelemetry(),
		)
		if err != nil {
			if tr != nil {
				t.Fatal("a Transport came back with an error")
			}
			return
		}
		tr.Close()
	})
}
