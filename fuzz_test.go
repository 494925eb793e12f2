package throttle_test

import (
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/apps"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/providers"
)

// nilOptions are the absent values a configuration may pass by mistake:
// untyped and typed nils, and a zero profile. Bit i of FuzzBuild's mask adds
// the i-th.
var nilOptions = []func() throttle.Option{
	func() throttle.Option { return throttle.WithRedis(nil) },
	func() throttle.Option { var c *redis.Client; return throttle.WithRedis(c) },
	func() throttle.Option { var c *redis.ClusterClient; return throttle.WithRedis(c) },
	func() throttle.Option { return throttle.WithLimiter(nil) },
	func() throttle.Option { var l *limiter.Memory; return throttle.WithLimiter(l) },
	func() throttle.Option { var l *limiter.Shared; return throttle.WithLimiter(l) },
	func() throttle.Option { var b *http.Transport; return throttle.WithBase(b) },
	func() throttle.Option { return throttle.WithBase(nil) },
	func() throttle.Option { var l *slog.Logger; return throttle.WithLogger(l) },
	func() throttle.Option { return throttle.WithApps(apps.Config{NegativeTTL: -1}) },
	func() throttle.Option { return throttle.WithProfiles(providers.Profile{}) },
	func() throttle.Option { return nil },
}

// Arbitrary option values, and any combination of absent ones, build a
// Transport or fail with an error naming the option; nothing panics.
func FuzzBuild(f *testing.F) {
	f.Add(int64(time.Second), 3, int64(time.Millisecond), int64(time.Second), uint16(0))
	f.Add(int64(-1), 0, int64(0), int64(0), uint16(0xffff))
	f.Add(int64(time.Second), 3, int64(time.Millisecond), int64(time.Second), uint16(2))
	f.Fuzz(func(t *testing.T, maxWait int64, attempts int, minB, maxB int64, nils uint16) {
		opts := []throttle.Option{
			throttle.WithMaxWait(time.Duration(maxWait)),
			throttle.WithRetry(throttle.RetryPolicy{MaxAttempts: attempts, MinBackoff: time.Duration(minB), MaxBackoff: time.Duration(maxB)}),
			throttle.WithoutTelemetry(),
		}
		for i, opt := range nilOptions {
			if nils&(1<<i) != 0 {
				opts = append(opts, opt())
			}
		}
		tr, err := throttle.New(opts...)
		if err != nil {
			if tr != nil {
				t.Fatal("a Transport came back with an error")
			}
			return
		}
		if nils&^(1<<(len(nilOptions)-1)) != 0 {
			t.Fatalf("New accepted an absent option (mask %b)", nils)
		}
		tr.Close()
	})
}
