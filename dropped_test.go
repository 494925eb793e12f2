package throttle_test

import (
	"context"
	"io"
	"net/http"
	"runtime"
	"testing"
	"time"
	"weak"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/apps"
	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/limitertest"
	"github.com/quotaware/throttle/limiter/rule"
)

// A Transport dropped without Close leaves the quota gauges once
// collected. Before, their callback kept reporting it, holding its
// limiter and reading it at every collection.
func TestDroppedTransportLeavesNoQuotaGauges(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	srv := serve(t, &recorder{answer: func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, `{}`) }})
	day := rule.Must(rule.NewCalendar("day:x", 1000, rule.Day, time.UTC))
	dropped := func() weak.Pointer[throttle.Transport] {
		tr := throttle.MustNew(throttle.WithProfiles(testProfile("q", day)), throttle.WithMeterProvider(mp),
			throttle.WithoutRetry(), throttle.WithLogger(quiet))
		resp, err := (&http.Client{Transport: tr}).Get(srv.URL + "/a")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return weak.Make(tr)
	}()
	if got := gaugePoints(t, reader, "throttle.quota.used"); got["q"] != 1 {
		t.Fatalf("throttle.quota.used = %v, want q: 1", got)
	}
	waitFor(t, 10*time.Second, func() bool {
		runtime.GC()
		return dropped.Value() == nil && len(gaugePoints(t, reader, "throttle.quota.used")) == 0
	})
}

// A Transport with WithApps on Redis dropped without Close ends its Book's
// listener once collected. Before, its goroutines and its Pub/Sub
// connection stayed for the life of the process: Redis counted its
// subscription to the Book's channel forever.
func TestDroppedTransportStopsTheAppsListener(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	prefix := limitertest.Group(t)
	channel := prefix + ":apps"
	subscribers := func() int64 {
		n, err := rdb.PubSubNumSub(context.Background(), channel).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n[channel]
	}
	dropped := func() weak.Pointer[throttle.Transport] {
		tr := throttle.MustNew(sharedOpt(t, rdb, limiter.SharedConfig{Prefix: prefix}),
			throttle.WithProfiles(testProfile("l", mustRule(t, 100, time.Second))),
			throttle.WithApps(apps.Config{Key: []byte("dropped-key-0123456789")}), throttle.WithoutTelemetry(), throttle.WithLogger(quiet))
		return weak.Make(tr)
	}()
	if n := subscribers(); n != 1 {
		t.Fatalf("%d subscribers of %s, want the Book's one", n, channel)
	}
	waitFor(t, 10*time.Second, func() bool {
		runtime.GC()
		return dropped.Value() == nil && subscribers() == 0
	})
}
