package throttle_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/rule"
	"github.com/quotaware/throttle/providers"
)

// dailyProfile limits calls to a daily quota per org (two orgs, so two keys
// share the rule name "day") and penalises the org on HTTP 429.
func dailyProfile(t *testing.T, host string) providers.Profile {
	t.Helper()
	day := rule.Must(rule.NewCalendar("day:org1", 100, rule.Day, time.UTC))
	day2 := rule.Must(day.WithKey("day:org2"))
	return providers.Profile{
		Name:  "daily",
		Match: func(r *http.Request) bool { return r.URL.Host == host },
		Route: func(r *http.Request) (providers.Route, error) {
			if r.URL.Query().Get("org") == "2" {
				return providers.Route{API: "/", Rules: []rule.Rule{day2}, Scopes: []string{"org:2"}}, nil
			}
			return providers.Route{API: "/", Rules: []rule.Rule{day}, Scopes: []string{"org:1"}}, nil
		},
		Classify: func(r *http.Request, resp *http.Response, _ *providers.Route) providers.Verdict {
			if resp.StatusCode == http.StatusTooManyRequests {
				return providers.Verdict{Kind: providers.Quota, Scope: "org:1", Until: time.Now().Add(time.Hour), Code: "429"}
			}
			return providers.Verdict{}
		},
	}
}

// With the in-process limiter: LiftPenalty lets the scope call again at
// once, and the gauges report each daily quota's count, the key nearest its
// limit per rule name, until Close.
func TestLiftPenaltyAndQuotaGaugesInProcess(t *testing.T) {
	var refuse atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if refuse.Swap(false) {
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	t.Cleanup(srv.Close)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	tr := throttle.MustNew(throttle.WithProfiles(dailyProfile(t, srv.Listener.Addr().String())),
		throttle.WithMeterProvider(mp), throttle.WithoutRetry(), throttle.WithLogger(quiet))
	client := &http.Client{Transport: tr}
	get := func(org string) (int, error) {
		resp, err := client.Get(srv.URL + "/?org=" + org)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	// org2 first: the gauges must not just report the first key met.
	if _, err := get("2"); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if code, err := get("1"); err != nil || code != http.StatusOK {
			t.Fatalf("call: %d, %v", code, err)
		}
	}
	refuse.Store(true)
	if code, _ := get("1"); code != http.StatusTooManyRequests {
		t.Fatalf("the refused call: %d", code)
	}
	if _, err := get("1"); !errors.Is(err, throttle.ErrPenalized) {
		t.Fatalf("after the quota error: %v, want ErrPenalized", err)
	}
	if err := tr.LiftPenalty(context.Background(), "daily", "org:1"); err != nil {
		t.Fatal(err)
	}
	if code, err := get("1"); err != nil || code != http.StatusOK {
		t.Fatalf("after LiftPenalty: %d, %v", code, err)
	}
	// org1: 3 + the refused one + 1 after the lift; org2: 1.
	points := quotaPoints(t, reader)
	if len(points) != 2 || points["throttle.quota.used"] != 5 || points["throttle.quota.limit"] != 100 {
		t.Fatalf("quota gauges %v, want used 5 (org1, the nearer its limit) and limit 100", points)
	}
	if err := tr.LiftPenalty(context.Background(), "nope", "org:1"); err == nil {
		t.Fatal("LiftPenalty of an unknown provider: no error")
	}
	tr.Close()
	if points := quotaPoints(t, reader); len(points) != 0 {
		t.Fatalf("quota gauges after Close: %v, want none", points)
	}
}

// quotaPoints collects once and returns the value of each quota gauge,
// checking that its attributes are provider, rule and window only.
func quotaPoints(t *testing.T, reader *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			g, ok := m.Data.(metricdata.Gauge[int64])
			if !ok || (m.Name != "throttle.quota.used" && m.Name != "throttle.quota.limit") {
				continue
			}
			for _, dp := range g.DataPoints {
				p, _ := dp.Attributes.Value("provider")
				r, _ := dp.Attributes.Value("rule")
				w, _ := dp.Attributes.Value("window")
				if p.AsString() != "daily" || r.AsString() != "day" || w.AsString() != "day" || dp.Attributes.Len() != 3 {
					t.Fatalf("%s: attributes %v", m.Name, dp.Attributes.ToSlice())
				}
				out[m.Name] = dp.Value
			}
		}
	}
	return out
}

// A limiter given with WithLimiter that cannot lift says so.
func TestLiftPenaltyUnsupported(t *testing.T) {
	tr := throttle.MustNew(throttle.WithProfiles(dailyProfile(t, "x")), throttle.WithLimiter(plainLimiter{limiter.NewMemory()}),
		throttle.WithoutTelemetry())
	if err := tr.LiftPenalty(context.Background(), "daily", "org:1"); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("LiftPenalty: %v, want errors.ErrUnsupported", err)
	}
}

// plainLimiter hides every method but the Limiter interface's.
type plainLimiter struct{ limiter.Limiter }

// The limit gauge reads the rule in force: a calendar rule whose limit
// changes under its key (WeChat's daily quota reconciled with the
// provider's count) used to be reported at the first limit seen.
func TestQuotaLimitGaugeFollowsTheRule(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(srv.Close)
	var limit atomic.Int64
	limit.Store(100)
	host := srv.Listener.Addr().String()
	profile := providers.Profile{
		Name:  "daily",
		Match: func(r *http.Request) bool { return r.URL.Host == host },
		Route: func(r *http.Request) (providers.Route, error) {
			day := rule.Must(rule.NewCalendar("day:org1", int(limit.Load()), rule.Day, time.UTC))
			return providers.Route{API: "/", Rules: []rule.Rule{day}, Scopes: []string{"org:1"}}, nil
		},
	}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	tr := throttle.MustNew(throttle.WithProfiles(profile), throttle.WithMeterProvider(mp), throttle.WithoutRetry(), throttle.WithLogger(quiet))
	t.Cleanup(func() { tr.Close() })
	client := &http.Client{Transport: tr}
	for _, l := range []int64{100, 10} {
		limit.Store(l)
		resp, err := client.Get(srv.URL + "/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if points := quotaPoints(t, reader); points["throttle.quota.limit"] != l {
			t.Fatalf("quota gauges %v with the rule at %d, want that limit", points, l)
		}
	}
}
