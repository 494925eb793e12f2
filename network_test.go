package throttle_test

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/internal/faultproxy"
	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/limitertest"
	"github.com/quotaware/throttle/limiter/rule"
)

// A slow, stalled or resetting network between the Transport and Redis: the
// limiter's timeout trips the fallback instead of hanging callers, and the
// Transport goes back to Redis once the network heals.
func TestSlowNetworkTripsFallback(t *testing.T) {
	srv := redistest.Shared(t)
	proxy := faultproxy.Start(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	direct := srv.Client(t)
	httpSrv := serve(t, &recorder{})
	group := limitertest.Group(t)
	logs := &syncBuffer{}
	// Well above a healthy loopback answer on a loaded machine under -race,
	// so that only the faults below make the switches counted.
	const timeout = 250 * time.Millisecond
	// A calendar rule far above the load marks that a request went through
	// Redis: its key lasts the day, where a paced key lasts a millisecond.
	marker, err := rule.NewCalendar("marker", 1_000_000_000, rule.Day, time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	tr := throttle.MustNew(throttle.WithoutTelemetry(), throttle.WithoutRetry(),
		throttle.WithProfiles(testProfile(group, mustRule(t, 100, 100*time.Millisecond), marker)),
		throttle.WithLogger(slog.New(slog.NewTextHandler(logs, nil))),
		sharedOpt(t, rdb, limiter.SharedConfig{Share: 1, Timeout: timeout, Probe: 50 * time.Millisecond, Recover: 200 * time.Millisecond}))
	t.Cleanup(func() { tr.Close() })
	c := &http.Client{Transport: tr}
	key := "{throttle:" + group + "}:r:marker"

	// call sends one request and returns how long it took; none may hang.
	call := func() time.Duration {
		t.Helper()
		began := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := get(ctx, c, httpSrv.URL+"/a"); err != nil {
			t.Fatalf("request failed: %v", err)
		}
		return time.Since(began)
	}
	// onRedis reports whether requests go through Redis again: the marker
	// rule's key is written there.
	onRedis := func() bool {
		direct.Del(context.Background(), key)
		call()
		return direct.Exists(context.Background(), key).Val() == 1
	}
	if !onRedis() {
		t.Fatal("requests do not reach Redis before any fault")
	}
	faults := []struct {
		name  string
		start func()
		heal  func()
	}{
		{"latency above the timeout", func() { proxy.SetLatency(3 * timeout) }, func() { proxy.SetLatency(0) }},
		{"stall", proxy.Stall, proxy.Resume},
		{"connection resets", func() { proxy.ResetAll(); proxy.Stall() }, proxy.Resume},
	}
	for i, f := range faults {
		f.start()
		var slowest time.Duration
		for i := 0; i < 20; i++ {
			slowest = max(slowest, call())
		}
		// Only the calls that meet the fault before the switch wait out the
		// timeout; the rest go local after at most one period of the rule
		// (100ms: the switch holds local slots that long after the last
		// Redis slot). Nothing waits for the fault.
		if slowest > 10*timeout {
			t.Errorf("%s: a call took %v, far beyond the %v limiter timeout", f.name, slowest, timeout)
		}
		f.heal()
		// Back on Redis: the switch is logged once (a probe runs on a call)
		// and requests write Redis again. (Held commands delivered on heal
		// may write the key too, so the key alone proves nothing.)
		waitFor(t, 5*time.Second, func() bool { call(); return countLines(logs.String(), "answers again") == i+1 })
		if !onRedis() {
			t.Fatalf("%s: healed and logged, but requests do not reach Redis", f.name)
		}
	}
	for _, want := range []string{"falling back", "answers again"} {
		if n := countLines(logs.String(), want); n != len(faults) {
			t.Errorf("%d log lines with %q, want one per fault (%d):\n%s", n, want, len(faults), logs)
		}
	}
	// The switch names the Redis it could not reach: a wrong address
	// shows at once.
	if want := "redis=" + proxy.Addr(); countLines(logs.String(), want) != len(faults) {
		t.Errorf("the switches do not name the Redis address (%s):\n%s", want, logs)
	}
}

func countLines(s, sub string) int { return strings.Count(s, sub) }

// A Redis that refuses the client's credentials is a setting to mend, not
// an outage: the switch to the fallback is logged as an error saying what
// to set (it read as a passing outage, and each replica limited alone
// until someone read the Redis error's NOAUTH).
func TestRedisWithoutItsPasswordSaysWhatToSet(t *testing.T) {
	srv := redistest.Start(t)
	if err := srv.Client(t).ConfigSet(context.Background(), "requirepass", "s3cret").Err(); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	logs := &syncBuffer{}
	tr := throttle.MustNew(throttle.WithoutTelemetry(), throttle.WithoutRetry(),
		throttle.WithProfiles(testProfile(limitertest.Group(t), mustRule(t, 100, time.Second))),
		throttle.WithLogger(slog.New(slog.NewTextHandler(logs, nil))), throttle.WithRedis(rdb))
	t.Cleanup(func() { tr.Close() })
	httpSrv := serve(t, &recorder{})
	if _, err := get(context.Background(), &http.Client{Transport: tr}, httpSrv.URL+"/a"); err != nil {
		t.Fatalf("request on the fallback: %v", err)
	}
	out := logs.String()
	if !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "set Password") || strings.Contains(out, "s3cret") {
		t.Fatalf("the switch was not logged as an error saying to set the password:\n%s", out)
	}
}
