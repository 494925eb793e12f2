package throttle_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/providers"
)

// observability collects everything a Transport exports.
type observability struct {
	spans  *tracetest.InMemoryExporter
	reader *sdkmetric.ManualReader
	logs   *syncBuffer
	opts   []throttle.Option
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newObservability(t *testing.T) *observability {
	o := &observability{spans: tracetest.NewInMemoryExporter(), reader: sdkmetric.NewManualReader(), logs: &syncBuffer{}}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(o.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(o.reader))
	t.Cleanup(func() { tp.Shutdown(context.Background()); mp.Shutdown(context.Background()) })
	logger := slog.New(slog.NewTextHandler(o.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	o.opts = []throttle.Option{throttle.WithTracerProvider(tp), throttle.WithMeterProvider(mp), throttle.WithLogger(logger)}
	return o
}

func (o *observability) metrics(t *testing.T) map[string]metricdata.Metrics {
	var rm metricdata.ResourceMetrics
	if err := o.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := make(map[string]metricdata.Metrics)
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// counts sums a counter's points by one attribute.
func counts(t *testing.T, m metricdata.Metrics, key string) map[string]int64 {
	sum, ok := m.Data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s is %T, want an int64 sum", m.Name, m.Data)
	}
	out := make(map[string]int64)
	for _, dp := range sum.DataPoints {
		v, _ := dp.Attributes.Value(attribute.Key(key))
		out[v.Emit()] += dp.Value
	}
	return out
}

func TestMetricsAndSpans(t *testing.T) {
	o := newObservability(t)
	rec := &recorder{answer: func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hot" {
			w.Header().Set("X-Test-Quota", "1")
		}
		io.WriteString(w, `{}`)
	}}
	srv := serve(t, rec)
	opts := append(o.opts, throttle.WithProfiles(testProfile("test", mustRule(t, 2, 400*time.Millisecond))),
		throttle.WithoutRetry(), throttle.WithMaxWait(time.Second))
	c := &http.Client{Transport: throttle.MustNew(opts...)}
	ctx := context.Background()
	// admitted, waited (the second slot is 200ms ahead), quota error, penalized.
	for _, path := range []string{"/a", "/a", "/hot", "/hot"} {
		get(ctx, c, srv.URL+path)
	}
	// throttled: a deadline too short for the next slot.
	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if _, err := get(short, c, srv.URL+"/a"); !errors.Is(err, throttle.ErrThrottled) {
		t.Fatalf("err = %v, want ErrThrottled", err)
	}

	ms := o.metrics(t)
	wantUnits := map[string]string{
		"throttle.requests": "{request}", "throttle.wait.duration": "s", "throttle.limiter.duration": "s",
		"throttle.penalties": "{penalty}", "throttle.breakers.open": "{breaker}", "throttle.limiter.fallback": "1",
	}
	for name, unit := range wantUnits {
		m, ok := ms[name]
		if !ok {
			t.Errorf("metric %s missing", name)
			continue
		}
		if m.Unit != unit || m.Description == "" {
			t.Errorf("%s: unit %q description %q, want unit %q and a description", name, m.Unit, m.Description, unit)
		}
	}
	got := counts(t, ms["throttle.requests"], "outcome")
	want := map[string]int64{"admitted": 1, "waited": 1, "quota_error": 1, "penalized": 1, "throttled": 1}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("throttle.requests{outcome=%s} = %d, want %d (all: %v)", k, got[k], v, got)
		}
	}
	if p := counts(t, ms["throttle.penalties"], "code"); p["429"] != 1 {
		t.Errorf("throttle.penalties by code = %v, want one 429", p)
	}
	if g := ms["throttle.breakers.open"].Data.(metricdata.Gauge[int64]); len(g.DataPoints) != 1 || g.DataPoints[0].Value != 1 {
		t.Errorf("throttle.breakers.open = %+v, want 1", g.DataPoints)
	}
	if h := ms["throttle.limiter.duration"].Data.(metricdata.Histogram[float64]); h.DataPoints[0].Count != 4 {
		t.Errorf("limiter calls recorded = %d, want 4 (the penalized request stops at the breaker)", h.DataPoints[0].Count)
	}

	// Spans only where throttling did something: waited, quota, penalized, throttled.
	spans := o.spans.GetSpans()
	outcomes := map[string]int{}
	for _, s := range spans {
		for _, a := range s.Attributes {
			if a.Key == "throttle.outcome" {
				outcomes[a.Value.Emit()]++
			}
		}
	}
	if len(spans) != 4 || outcomes["admitted"] != 0 || outcomes["waited"] != 1 || outcomes["penalized"] != 1 {
		t.Errorf("spans by outcome %v (%d spans), want waited, quota_error, penalized, throttled", outcomes, len(spans))
	}
	if !strings.Contains(o.logs.String(), "penalised a scope") {
		t.Errorf("no penalty log line in %q", o.logs)
	}
}

// The throttling span is a child of the caller's span.
func TestSpanIsChildOfCaller(t *testing.T) {
	o := newObservability(t)
	srv := serve(t, &recorder{})
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(o.spans))
	opts := append(o.opts, throttle.WithTracerProvider(tp),
		throttle.WithProfiles(testProfile("test", mustRule(t, 1, 100*time.Millisecond))))
	c := &http.Client{Transport: throttle.MustNew(opts...)}
	ctx, parent := tp.Tracer("caller").Start(context.Background(), "caller")
	get(ctx, c, srv.URL+"/a")
	get(ctx, c, srv.URL+"/a") // waits ~100ms: gets a span
	parent.End()
	for _, s := range o.spans.GetSpans() {
		if s.Name == "caller" {
			continue
		}
		if s.Parent.SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("span %q has parent %v, want the caller's span", s.Name, s.Parent.SpanID())
		}
	}
}

// No exported span attribute, event, metric attribute or log line carries
// an access token, whether in the query or in a header.
func TestNoSecretLeaves(t *testing.T) {
	const secret = "SECRET-TOKEN-4f1d2c"
	o := newObservability(t)
	rec := &recorder{answer: func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Test-Quota", "1")
		io.WriteString(w, `{"errcode":90018}`)
	}}
	srv := serve(t, rec)
	profile := testProfile("test", mustRule(t, 1, 50*time.Millisecond))
	opts := append(o.opts, throttle.WithProfiles(profile), throttle.WithRetry(throttle.RetryPolicy{
		MaxAttempts: 3, MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond}))
	c := &http.Client{Transport: throttle.MustNew(opts...)}
	for i, path := range []string{"/topapi/v2/user/get?access_token=" + secret, "/v1.0/contact/users/" + secret} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		req.Header.Set("x-acs-dingtalk-access-token", secret)
		req.Header.Set("Authorization", "Bearer "+secret)
		if resp, err := c.Do(req); err == nil {
			resp.Body.Close()
		} else if i == 0 {
			t.Fatalf("first request: %v", err)
		}
	}
	var exported strings.Builder
	for _, s := range o.spans.GetSpans() {
		fmt.Fprintf(&exported, "%s %v %v %v\n", s.Name, s.Attributes, s.Events, s.Status)
	}
	fmt.Fprintf(&exported, "%+v\n", o.metrics(t))
	exported.WriteString(o.logs.String())
	if strings.Contains(exported.String(), secret) || strings.Contains(exported.String(), "SECRET") {
		t.Fatalf("a token leaked into telemetry:\n%s", exported.String())
	}
	if !strings.Contains(exported.String(), "throttle.requests") || len(o.spans.GetSpans()) == 0 {
		t.Fatalf("nothing was exported, so the check proves nothing:\n%s", exported.String())
	}
}

// A retried call counts its retries and carries a retry event on its span.
func TestRetryTelemetry(t *testing.T) {
	o := newObservability(t)
	srv := serve(t, scripted(busy))
	opts := append(o.opts, throttle.WithProfiles(testProfile("test", mustRule(t, 100, time.Second))),
		throttle.WithRetry(throttle.RetryPolicy{MaxAttempts: 3, MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}))
	c := &http.Client{Transport: throttle.MustNew(opts...)}
	if _, err := get(context.Background(), c, srv.URL+"/a"); err != nil {
		t.Fatal(err)
	}
	ms := o.metrics(t)
	r, ok := ms["throttle.retries"]
	if !ok || r.Unit != "{retry}" {
		t.Fatalf("throttle.retries missing or without its unit: %+v", r)
	}
	if n := counts(t, r, "provider")["test"]; n != 1 {
		t.Errorf("throttle.retries = %d, want 1", n)
	}
	// One call, counted once with its last attempt's outcome (that attempt
	// may have waited for its slot: each attempt takes its own).
	if got := counts(t, ms["throttle.requests"], "outcome"); got["admitted"]+got["waited"] != 1 || len(got) != 1 {
		t.Errorf("throttle.requests by outcome = %v, want one successful call", got)
	}
	spans := o.spans.GetSpans()
	if len(spans) != 1 || len(spans[0].Events) != 1 || spans[0].Events[0].Name != "throttle.retry" {
		t.Fatalf("spans %v, want one span with a throttle.retry event", spans)
	}
}

// A request its profile cannot route (a config that cannot work, such as
// a DingTalk ISV app without its org) fails, sending nothing, and shows as
// route_error in throttle.requests and in a span: it was recorded nowhere,
// so a misconfiguration failing every call left the dashboards quiet.
func TestRouteErrorIsRecorded(t *testing.T) {
	o := newObservability(t)
	p := testProfile("p")
	p.Route = func(*http.Request) (providers.Route, error) {
		return providers.Route{}, errors.New("no route for this request")
	}
	var sent int
	base := roundTripFunc(func(*http.Request) (*http.Response, error) { sent++; return nil, errors.New("sent") })
	tr := throttle.MustNew(append(o.opts, throttle.WithProfiles(p), throttle.WithBase(base))...)
	defer tr.Close()
	req, _ := http.NewRequest(http.MethodGet, "https://p.example/api", nil)
	if _, err := tr.RoundTrip(req); err == nil || !strings.Contains(err.Error(), "no route for this request") || sent != 0 {
		t.Fatalf("RoundTrip: %v, %d sent; want the route's error and nothing sent", err, sent)
	}
	if got := counts(t, o.metrics(t)["throttle.requests"], "outcome"); len(got) != 1 || got["route_error"] != 1 {
		t.Errorf("throttle.requests by outcome = %v, want route_error: 1", got)
	}
	spans := o.spans.GetSpans()
	if len(spans) != 1 || spans[0].Status.Code != codes.Error {
		t.Fatalf("%d spans (%+v), want one with an error status", len(spans), spans)
	}
}
