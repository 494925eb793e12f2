package throttle_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/providers"
)

// A Transport whose base is a Transport limiting the same provider
// (http.DefaultTransport replaced by one before a second New) would book
// every request twice, at half its limit: New refuses it, naming the
// provider and what to do.
func TestTransportOverOneOfTheSameProviderIsRefused(t *testing.T) {
	inner := throttle.MustNew(throttle.WithBase(&answerAll{}), throttle.WithoutTelemetry(),
		throttle.WithProfiles(testProfile("dingtalk", mustRule(t, 20, time.Second))))
	defer inner.Close()
	_, err := throttle.New(throttle.WithBase(inner), throttle.WithoutTelemetry(),
		throttle.WithProfiles(testProfile("dingtalk", mustRule(t, 20, time.Second))))
	if err == nil || !strings.Contains(err.Error(), `limits "dingtalk" too`) || !strings.Contains(err.Error(), "use that Transport") {
		t.Fatalf("New over a Transport of the same provider: %v, want an error naming it", err)
	}
}

// A Transport over one that limits another provider works, and the inner
// one does not report the outer one's requests as sent without limits
// (the unmatched alert is a critical one); its own unmatched requests it
// still reports.
func TestTransportOverOneOfAnotherProvider(t *testing.T) {
	o := newObservability(t)
	base := &answerAll{}
	wechat := testProfile("wechat", mustRule(t, 1000, time.Second))
	wechat.Match = providers.MatchHosts("api.weixin.qq.com")
	inner := throttle.MustNew(append(o.opts, throttle.WithBase(base), throttle.WithProfiles(wechat), throttle.WithoutRetry())...)
	defer inner.Close()
	dingtalk := testProfile("dingtalk", mustRule(t, 1000, time.Second))
	dingtalk.Match = providers.MatchHosts("oapi.dingtalk.com")
	outer := throttle.MustNew(throttle.WithBase(inner), throttle.WithProfiles(dingtalk), throttle.WithoutTelemetry(), throttle.WithoutRetry())
	defer outer.Close()

	for _, c := range []struct {
		rt  http.RoundTripper
		url string
	}{
		{outer, "https://oapi.dingtalk.com/topapi/v2/user/get"},  // limited above
		{outer, "https://api.weixin.qq.com/cgi-bin/user/info"},   // limited below
		{inner, "https://oapi.dingtalk.com/topapi/v2/user/list"}, // limited nowhere
	} {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, c.url, nil)
		resp, err := (&http.Client{Transport: c.rt}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if base.n != 3 {
		t.Fatalf("base saw %d requests, want 3", base.n)
	}
	got := counts(t, o.metrics(t)["throttle.requests.unmatched"], "provider")
	if got["dingtalk"] != 1 || len(got) != 1 {
		t.Fatalf("unmatched = %v, want dingtalk 1 (the request sent to the inner Transport alone)", got)
	}
}
