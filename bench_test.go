package throttle_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/providers/dingtalk"
)

// The Transport's overhead per request when no wait is needed, against a
// plain http.Transport to the same local server. The rule is far above the
// load, so every request is admitted at once.
func BenchmarkTransportOverhead(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"errcode":0,"errmsg":"ok","result":{"userid":"manager4220","name":"x"}}`)
	}))
	defer srv.Close()
	ding := dingtalk.MustProfile(dingtalk.Config{AppKey: "dingbench", Hosts: []string{srv.Listener.Addr().String()},
		PerAPIRate: 1_000_000, EgressLimit: 1_000_000_000, EgressPeriod: time.Second, MonthlyQuota: -1})
	rule := limiter.MustRule(limiter.NewRule("r", 1_000_000_000, time.Second))
	profile := testProfile("bench", rule)
	base := func() *http.Transport {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 64
		return tr
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewInMemoryExporter()))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer tp.Shutdown(context.Background())
	defer mp.Shutdown(context.Background())

	cases := []struct {
		name string
		rt   func() http.RoundTripper
	}{
		{"plain http.Transport", func() http.RoundTripper { return base() }},
		{"throttle telemetry off", func() http.RoundTripper {
			return throttle.New(throttle.WithBase(base()), throttle.WithProfiles(profile), throttle.WithoutTelemetry(), throttle.WithoutRetry())
		}},
		{"throttle telemetry on (SDK)", func() http.RoundTripper {
			return throttle.New(throttle.WithBase(base()), throttle.WithProfiles(profile), throttle.WithoutRetry(),
				throttle.WithTracerProvider(tp), throttle.WithMeterProvider(mp))
		}},
		{"throttle dingtalk preset, telemetry off", func() http.RoundTripper {
			return throttle.New(throttle.WithBase(base()), throttle.WithProfiles(ding), throttle.WithoutTelemetry(), throttle.WithoutRetry())
		}},
		{"throttle telemetry on, retries on", func() http.RoundTripper {
			return throttle.New(throttle.WithBase(base()), throttle.WithProfiles(profile),
				throttle.WithTracerProvider(tp), throttle.WithMeterProvider(mp))
		}},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			c := &http.Client{Transport: tc.rt()}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := c.Get(srv.URL + "/topapi/v2/user/get")
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		})
	}
}
