package throttle_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/limiter/rule"
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
	ding := dingtalk.MustNew(dingtalk.Config{Hosts: []string{srv.Listener.Addr().String()}, EgressLimit: 1_000_000_000, EgressPeriod: time.Second, Apps: []dingtalk.App{{AppKey: "dingbench", PerAPIRate: 1_000_000, Burst: 1000, NoMonthlyQuota: true}}}).Profile()
	// A burst far above the concurrency, so that no request waits even a
	// microsecond (a 1µs timer costs more than the rest of the pipeline).
	rl := rule.Must(rule.New("r", 1_000_000_000, time.Second, rule.WithBurst(1_000_000)))
	profile := testProfile("bench", rl)
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
			return throttle.MustNew(throttle.WithBase(base()), throttle.WithProfiles(profile), throttle.WithoutTelemetry(), throttle.WithoutRetry())
		}},
		{"throttle telemetry on (SDK)", func() http.RoundTripper {
			return throttle.MustNew(throttle.WithBase(base()), throttle.WithProfiles(profile), throttle.WithoutRetry(),
				throttle.WithTracerProvider(tp), throttle.WithMeterProvider(mp))
		}},
		{"throttle dingtalk preset, telemetry off", func() http.RoundTripper {
			return throttle.MustNew(throttle.WithBase(base()), throttle.WithProfiles(ding), throttle.WithoutTelemetry(), throttle.WithoutRetry())
		}},
		{"throttle telemetry on, retries on", func() http.RoundTripper {
			return throttle.MustNew(throttle.WithBase(base()), throttle.WithProfiles(profile),
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

// canned answers every request at once, without a network: what remains is
// the Transport's own cost per request.
type canned struct{}

func (canned) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(`{"errcode":0,"errmsg":"ok"}`)), ContentLength: 27, Request: r}, nil
}

// The pipeline alone (match, route, breaker, in-memory reserve, classify,
// telemetry) over a base transport that costs nothing.
func BenchmarkTransportPipeline(b *testing.B) {
	rl := rule.Must(rule.New("r", 1_000_000_000, time.Second, rule.WithBurst(1_000_000)))
	ding := dingtalk.MustNew(dingtalk.Config{EgressLimit: 1_000_000_000, EgressPeriod: time.Second, Apps: []dingtalk.App{{AppKey: "dingbench", PerAPIRate: 1_000_000, Burst: 1000, NoMonthlyQuota: true}}}).Profile()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer mp.Shutdown(context.Background())
	cases := []struct {
		name string
		rt   http.RoundTripper
	}{
		{"no throttle", canned{}},
		{"test profile, telemetry off", throttle.MustNew(throttle.WithBase(canned{}), throttle.WithProfiles(testProfile("bench", rl)),
			throttle.WithoutTelemetry(), throttle.WithoutRetry())},
		{"dingtalk preset, telemetry off", throttle.MustNew(throttle.WithBase(canned{}), throttle.WithProfiles(ding),
			throttle.WithoutTelemetry(), throttle.WithoutRetry())},
		{"dingtalk preset, metrics (SDK)", throttle.MustNew(throttle.WithBase(canned{}), throttle.WithProfiles(ding),
			throttle.WithMeterProvider(mp), throttle.WithoutRetry())},
		{"dingtalk preset, metrics, retries", throttle.MustNew(throttle.WithBase(canned{}), throttle.WithProfiles(ding),
			throttle.WithMeterProvider(mp))},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			req, _ := http.NewRequest(http.MethodGet, "https://oapi.dingtalk.com/topapi/v2/user/get?access_token=t", nil)
			b.ReportAllocs()
			for b.Loop() {
				resp, err := tc.rt.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
}
