package throttle_test

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/apps"
	"github.com/quotaware/throttle/providers/dingtalk"
)

// What learning apps adds to the pipeline (BenchmarkTransportPipeline): a
// request whose token this replica knows (the common case: no Redis call)
// routed by the many-apps preset, against the single-app preset; and one
// whose token nobody knows (a negative cache hit, then the default app).
func BenchmarkTransportPipelineApps(b *testing.B) {
	const tok = "5f1e0a4c2b9d8e7f6a5b4c3d2e1f0a9b"
	fast := dingtalk.App{PerAPIRate: 1_000_000, Burst: 1000, NoMonthlyQuota: true}
	single := dingtalk.Config{EgressLimit: 1_000_000_000, EgressPeriod: time.Second, Apps: []dingtalk.App{fast}}
	single.Apps[0].AppKey = "dingbench"
	many := []dingtalk.App{}
	for _, k := range []string{"dingbench", "dingother", "dingthird"} {
		c := fast
		c.AppKey = k
		many = append(many, c)
	}
	set := dingtalk.MustNew(dingtalk.Config{EgressLimit: 1_000_000_000, EgressPeriod: time.Second, Apps: many, Default: "dingbench"})
	learned := throttle.MustNew(throttle.WithBase(canned{}), throttle.WithProfiles(set.Profile()),
		throttle.WithApps(apps.Config{}), throttle.WithoutTelemetry(), throttle.WithoutRetry())
	_ = learned.Apps().Learn(context.Background(), tok, apps.App{Provider: "dingtalk", ID: "dingbench"}, time.Hour)
	cases := []struct {
		name, token string
		rt          http.RoundTripper
	}{
		{"dingtalk preset, one app", tok, throttle.MustNew(throttle.WithBase(canned{}), throttle.WithProfiles(dingtalk.MustNew(single).Profile()),
			throttle.WithoutTelemetry(), throttle.WithoutRetry())},
		{"dingtalk Apps, token learned", tok, learned},
		{"dingtalk Apps, token unknown", "unknown-token", learned},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			req, _ := http.NewRequest(http.MethodGet, "https://oapi.dingtalk.com/topapi/v2/user/get?access_token="+tc.token, nil)
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
