package throttle_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/apps"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/rule"
	"github.com/quotaware/throttle/providers"
	"github.com/quotaware/throttle/providers/dingtalk"
	"github.com/quotaware/throttle/providers/wechat"
)

// answerAll is a base transport that answers every request with 200, so a
// test can send to a provider's real host name without leaving the process.
type answerAll struct{ n int }

func (a *answerAll) RoundTrip(req *http.Request) (*http.Response, error) {
	a.n++
	return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(`{}`)), Request: req}, nil
}

// A request to a provider's API host that no profile matched goes out
// unprotected: it is counted by provider and logged once per host, so a
// host typed wrong in a profile shows up.
func TestUnmatchedProviderRequestIsCountedAndLogged(t *testing.T) {
	o := newObservability(t)
	p := testProfile("dingtalk", mustRule(t, 1, 1e9))
	p.Match = providers.MatchHosts("api.dingtalk.example")
	base := &answerAll{}
	tr := throttle.MustNew(append(o.opts, throttle.WithBase(base), throttle.WithProfiles(p), throttle.WithoutRetry())...)
	defer tr.Close()
	c := &http.Client{Transport: tr}
	ctx := context.Background()
	for _, u := range []string{
		"https://api.dingtalk.com/v1.0/contact/users/me?access_token=secret-token",
		"https://api.dingtalk.com/v1.0/contact/users/me",
		"https://oapi.dingtalk.com/topapi/v2/user/get",
		"https://qyapi.weixin.qq.com/cgi-bin/message/send",
		"https://example.org/not-a-provider",
		"https://api.mch.weixin.qq.com/v3/pay/transactions/jsapi", // WeChat Pay: no API the presets limit
		"https://mp.weixin.qq.com/cgi-bin/showqrcode?ticket=t",
		"https://sh.api.weixin.qq.com/cgi-bin/user/info", // a regional host of WeChat's API
		"http://10.0.0.9:8080/v1.0/contact/users/me",     // sent to a gateway naming DingTalk in its Host header
	} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if strings.HasPrefix(u, "http://10.") {
			req.Host = "api.dingtalk.com"
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if base.n != 9 {
		t.Fatalf("base saw %d requests, want 9 (unmatched requests still go out)", base.n)
	}
	m, ok := o.metrics(t)["throttle.requests.unmatched"]
	if !ok {
		t.Fatal("no throttle.requests.unmatched metric")
	}
	got := counts(t, m, "provider")
	if got["dingtalk"] != 4 || got["wecom"] != 1 || got["wechat"] != 1 || len(got) != 3 {
		t.Fatalf("unmatched = %v, want dingtalk 4, wecom 1, wechat 1 (its API's regional host; not Pay's or mp.)", got)
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
// errors from New that name the option, never a panic.
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
			tr, err := throttle.New(tc.opt)
			if err == nil {
				tr.Close()
				t.Fatal("New accepted a typed nil")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not name %s", err, tc.want)
			}
		})
	}
}

// The retry documentation, case by case: a preset retries a 503 of a GET
// and returns the 503 of a POST (a gateway's 5xx does not prove the API did
// not act, and a message sent twice cannot be taken back).
func TestPreset503RetriedForIdempotentMethodsOnly(t *testing.T) {
	rec := &recorder{answer: func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, "busy")
	}}
	srv := serve(t, rec)
	p := dingtalk.MustNew(dingtalk.Config{Hosts: []string{strings.TrimPrefix(srv.URL, "http://")}, Apps: []dingtalk.App{{AppKey: "dingretry"}}}).Profile()
	tr := throttle.MustNew(throttle.WithProfiles(p), throttle.WithLimiter(limiter.NewMemory()), throttle.WithoutTelemetry(),
		throttle.WithRetry(throttle.RetryPolicy{MaxAttempts: 3, MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond}))
	defer tr.Close()
	c := &http.Client{Transport: tr}
	for _, tc := range []struct {
		method string
		want   int
	}{{http.MethodPost, 1}, {http.MethodGet, 3}} {
		before := len(rec.seen())
		resp, _, err := do(t, c, tc.method, srv.URL+"/topapi/v2/user/get?access_token=tok", `{"userid":"u1"}`)
		if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("%s: resp %v err %v, want the 503", tc.method, resp, err)
		}
		if n := len(rec.seen()) - before; n != tc.want {
			t.Errorf("%s: %d attempts at the server, want %d", tc.method, n, tc.want)
		}
	}
}

// A body over 1 MiB without GetBody cannot be sent again: the call is not
// retried, and its span says why instead of dropping the retry silently.
func TestLongBodyWithoutGetBodyIsNotRetriedVisibly(t *testing.T) {
	o := newObservability(t)
	rec := &recorder{answer: func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusServiceUnavailable)
	}}
	srv := serve(t, rec)
	tr := throttle.MustNew(append(o.opts, throttle.WithProfiles(testProfile("test", mustRule(t, 100, time.Second))),
		throttle.WithRetry(throttle.RetryPolicy{MaxAttempts: 3, MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond}))...)
	defer tr.Close()
	body := io.MultiReader(strings.NewReader(strings.Repeat("x", 5<<20))) // no GetBody
	req, err := http.NewRequest(http.MethodPut, srv.URL+"/upload", body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if n := len(rec.seen()); n != 1 {
		t.Fatalf("%d attempts, want 1", n)
	}
	spans := o.spans.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	found := false
	for _, ev := range spans[0].Events {
		found = found || ev.Name == "throttle.retry_skipped"
		if ev.Name == "throttle.retry" {
			t.Fatalf("span events %v: a throttle.retry for the retry that was skipped", spans[0].Events)
		}
	}
	if !found {
		t.Fatalf("span events %v lack throttle.retry_skipped", spans[0].Events)
	}
}

// A request sent to a gateway by its URL, naming the provider in its Host
// header (the gateway forwards by it), is limited by the provider's
// profile: it passed unlimited and unreported. A profile of the gateway's
// own address keeps the requests its URL names, whatever their Host.
func TestGatewayRequestsMatchByTheirHostHeader(t *testing.T) {
	dt := dingtalk.MustNew(dingtalk.Config{Apps: []dingtalk.App{{AppKey: "dingapp", PerAPIRate: 1}}}).Profile()
	gateway := testProfile("gateway", rule.Must(rule.New("gw", 1000, time.Second, rule.WithBurst(100))))
	gateway.Match = providers.MatchHosts("10.0.0.9")
	send := func(tr *throttle.Transport) error {
		req, _ := http.NewRequest(http.MethodGet, "http://10.0.0.9:8080/topapi/v2/user/get?access_token=tok", nil)
		req.Host = "oapi.dingtalk.com"
		resp, err := tr.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	for _, tc := range []struct {
		name     string
		profiles []providers.Profile
		second   error // the second request's error: DingTalk's 1/s binds
	}{
		{"the provider's profile alone", []providers.Profile{dt}, throttle.ErrThrottled},
		{"a profile of the gateway too", []providers.Profile{dt, gateway}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := throttle.MustNew(throttle.WithBase(&answerAll{}), throttle.WithProfiles(tc.profiles...), throttle.WithMaxWait(0),
				throttle.WithoutRetry(), throttle.WithoutTelemetry(), throttle.WithLogger(quiet))
			defer tr.Close()
			if err := send(tr); err != nil {
				t.Fatal(err)
			}
			if err := send(tr); !errors.Is(err, tc.second) && err != tc.second {
				t.Fatalf("second request: %v, want %v", err, tc.second)
			}
		})
	}
}

// A preset listing several apps, given to a Transport without WithApps,
// charges every untagged request to one app's quotas: New says so once (at
// Info: a service that tags every request is set up right),
// and says nothing with WithApps or with one app.
func TestSeveralAppsWithoutWithAppsWarns(t *testing.T) {
	two := wechat.MustNew(wechat.Config{Apps: []wechat.App{{AppID: "wxa"}, {AppID: "wxb"}}}).Profile()
	one := wechat.MustNew(wechat.Config{Apps: []wechat.App{{AppID: "wxa"}}}).Profile()
	for name, c := range map[string]struct {
		opts []throttle.Option
		warn bool
	}{
		"two apps":               {[]throttle.Option{throttle.WithProfiles(two)}, true},
		"two apps with WithApps": {[]throttle.Option{throttle.WithProfiles(two), throttle.WithApps(apps.Config{})}, false},
		"one app":                {[]throttle.Option{throttle.WithProfiles(one)}, false},
	} {
		var logs bytes.Buffer
		tr, err := throttle.New(append(c.opts, throttle.WithoutTelemetry(),
			throttle.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))))...)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		tr.Close()
		if got := strings.Count(logs.String(), "without WithApps"); got != map[bool]int{true: 1, false: 0}[c.warn] {
			t.Errorf("%s: warned %d times: %s", name, got, logs.String())
		}
	}
}

// A refusal whose slot is minutes away says where its budget comes from; a
// day's does not (no budget would wait for it).
func TestThrottledErrorSaysWhereTheBudgetComesFrom(t *testing.T) {
	minute := &throttle.ThrottledError{Provider: "p", API: "a", Rule: "r: 20 per 1m0s", RetryAfter: 20 * time.Second, Budget: 2 * time.Second}
	day := &throttle.ThrottledError{Provider: "p", API: "a", Rule: "r: 3 per day", RetryAfter: 15 * time.Hour, Budget: 2 * time.Second}
	if !strings.Contains(minute.Error(), "WithMaxWait") || strings.Contains(day.Error(), "WithMaxWait") {
		t.Errorf("a slot 20 s away: %q; a day away: %q", minute.Error(), day.Error())
	}
}
