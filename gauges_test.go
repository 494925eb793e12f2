package throttle_test

import (
	"context"
	"io"
	"net/http"
	"runtime"
	"testing"
	"time"
	"weak"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/quotaware/throttle"
)

// gaugePoints reads a gauge's points by provider.
func gaugePoints(t *testing.T, reader *sdkmetric.ManualReader, name string) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := make(map[string]int64)
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			g, ok := m.Data.(metricdata.Gauge[int64])
			if !ok {
				t.Fatalf("%s is %T, want an int64 gauge", name, m.Data)
			}
			for _, dp := range g.DataPoints {
				v, _ := dp.Attributes.Value(attribute.Key("provider"))
				out[v.AsString()] = dp.Value
			}
		}
	}
	return out
}

// With several Transports on one MeterProvider, the gauges report each
// provider once, summed over the Transports; Close takes a Transport out,
// and a dropped Transport leaves them once collected.
func TestGaugesPerProviderAcrossTransports(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	rec := &recorder{answer: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Test-Quota", "1")
		io.WriteString(w, `{"errcode":90018}`)
	}}
	srv := serve(t, rec)
	newTransport := func(name string) *throttle.Transport {
		return throttle.MustNew(throttle.WithProfiles(testProfile(name, mustRule(t, 100, time.Second))),
			throttle.WithMeterProvider(mp), throttle.WithoutRetry(), throttle.WithLogger(quiet))
	}
	a1, a2 := newTransport("a"), newTransport("a")
	// b is dropped without Close further down; only a weak pointer stays.
	b := weak.Make(newTransport("b"))
	// One penalised scope in each Transport of provider a.
	for _, tr := range []*throttle.Transport{a1, a2} {
		resp, err := (&http.Client{Transport: tr}).Get(srv.URL + "/hot")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if got := gaugePoints(t, reader, "throttle.breakers.open"); len(got) != 2 || got["a"] != 2 || got["b"] != 0 {
		t.Fatalf("breakers.open = %v, want a=2 (both Transports) b=0", got)
	}
	if got := gaugePoints(t, reader, "throttle.limiter.fallback"); len(got) != 2 || got["a"] != 0 || got["b"] != 0 {
		t.Fatalf("limiter.fallback = %v, want a=0 b=0", got)
	}
	a1.Close()
	if got := gaugePoints(t, reader, "throttle.breakers.open"); got["a"] != 1 {
		t.Fatalf("after closing one: breakers.open = %v, want a=1", got)
	}
	a2.Close()
	if got := gaugePoints(t, reader, "throttle.breakers.open"); len(got) != 1 || got["b"] != 0 {
		t.Fatalf("after closing provider a's Transports: breakers.open = %v, want only b", got)
	}
	// b is dropped without Close: once collected, the gauges forget it
	// (the callback does not keep it alive).
	waitFor(t, 10*time.Second, func() bool {
		runtime.GC()
		return b.Value() == nil && len(gaugePoints(t, reader, "throttle.breakers.open")) == 0
	})
}
