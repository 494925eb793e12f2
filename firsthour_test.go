package throttle_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/providers"
)

// answerAll is a base transport that answers every request with 200, so a
// test can send to a provider's real host name without leaving the process.
type answerAll struct{ n int }

func (a *answerAll) RoundTrip(req *http.Request) (*http.Response, error) {
	a.n++
	return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(`{}`)), Request: req}, nil
}

// A request to a provider's domain that no profile matched goes out
// unprotected: it is counted by provider and logged once per host, so a
// host typed wrong in a profile shows up.
func TestUnmatchedProviderRequestIsCountedAndLogged(t *testing.T) {
	o := newObservability(t)
	p := testProfile("dingtalk", mustRule(t, 1, 1e9))
	p.Match = providers.MatchHosts("api.dingtalk.example")
	base := &answerAll{}
	tr := throttle.New(append(o.opts, throttle.WithBase(base), throttle.WithProfiles(p), throttle.WithoutRetry())...)
	defer tr.Close()
	c := &http.Client{Transport: tr}
	ctx := context.Background()
	for _, u := range []string{
		"https://api.dingtalk.com/v1.0/contact/users/me?access_token=secret-token",
		"https://api.dingtalk.com/v1.0/contact/users/me",
		"https://oapi.dingtalk.com/topapi/v2/user/get",
		"https://qyapi.weixin.qq.com/cgi-bin/message/send",
		"https://example.org/not-a-provider",
	} {
		if _, err := get(ctx, c, u); err != nil {
			t.Fatal(err)
		}
	}
	if base.n != 5 {
		t.Fatalf("base saw %d requests, want 5 (unmatched requests still go out)", base.n)
	}
	m, ok := o.metrics(t)["throttle.requests.unmatched"]
	if !ok {
		t.Fatal("no throttle.requests.unmatched metric")
	}
	got := counts(t, m, "provider")
	if got["dingtalk"] != 3 || got["wecom"] != 1 || len(got) != 2 {
		t.Fatalf("unmatched = %v, want dingtalk 3, wecom 1", got)
	}
	logs := o.logs.String()
	if n := strings.Count(logs, "host=api.dingtalk.com"); n != 1 {
		t.Fatalf("api.dingtalk.com logged %d times, want once:\n%s", n, logs)
	}
	if !strings.Contains(logs, "host=oapi.dingtalk.com") || !strings.Contains(logs, "provider=wecom") {
		t.Fatalf("logs miss a host:\n%s", logs)
	}
	if strings.Contains(logs, "secret-token") || strings.Contains(logs, "example.org") {
		t.Fatalf("logs say too much:\n%s", logs)
	}
}

// Typed nils ("var rdb *redis.Client" when Redis is not configured) are
// errors from Build that name the option, never a panic.
func TestTypedNilOptionsAreErrors(t *testing.T) {
	var rdb *redis.Client
	var cluster *redis.ClusterClient
	var mem *limiter.Memory
	var shared *limiter.Shared
	var base *http.Transport
	var mp *sdkmetric.MeterProvider
	var tp *sdktrace.TracerProvider
	for _, tc := range []struct {
		name string
		opt  throttle.Option
		want string
	}{
		{"redis client", throttle.WithRedis(rdb), "WithRedis"},
		{"cluster client", throttle.WithRedis(cluster), "WithRedis"},
		{"memory limiter", throttle.WithLimiter(mem), "WithLimiter"},
		{"shared limiter", throttle.WithLimiter(shared), "WithLimiter"},
		{"base", throttle.WithBase(base), "WithBase"},
		{"meter provider", throttle.WithMeterProvider(mp), "WithMeterProvider"},
		{"tracer provider", throttle.WithTracerProvider(tp), "WithTracerProvider"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := throttle.Build(tc.opt)
			if err == nil {
				tr.Close()
				t.Fatal("Build accepted a typed nil")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not name %s", err, tc.want)
			}
		})
	}
}
