package throttle_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/limitertest"
	"github.com/quotaware/throttle/providers/wechat"
)

// tokenAnswer is a base transport that answers a token exchange with a
// token and any other call with success.
type tokenAnswer struct{}

func (tokenAnswer) RoundTrip(r *http.Request) (*http.Response, error) {
	body := `{"errcode":0,"errmsg":"ok"}`
	if r.URL.Path == "/cgi-bin/token" {
		body = `{"access_token":"ACCESS_TOKEN_0123456789abcdef","expires_in":7200}`
	}
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)), Request: r}, nil
}

// Through a Transport on a loopback Redis: an exchange answered from
// Redis (before the limiter: one GET, no reservation), and a normal call
// with the sharing on and off (its added cost: a path comparison).
func BenchmarkTransportSharedTokens(b *testing.B) {
	srv := redistest.Start(b)
	prefix := limitertest.Group(b)
	set := wechat.MustNew(wechat.Config{Apps: []wechat.App{{AppID: "wx1000000000000001"}}})
	build := func(opts ...throttle.Option) *throttle.Transport {
		tr := throttle.MustNew(append([]throttle.Option{throttle.WithBase(tokenAnswer{}), throttle.WithProfiles(set.Profile()),
			throttle.WithLimiter(limiter.MustNewShared(srv.Client(b), limiter.SharedConfig{Prefix: prefix})),
			throttle.WithoutTelemetry(), throttle.WithoutRetry()}, opts...)...)
		b.Cleanup(func() { tr.Close() })
		return tr
	}
	shared, unshared := build(), build(throttle.WithoutSharedTokens())
	exchange, _ := http.NewRequest("GET", "https://api.weixin.qq.com/cgi-bin/token?grant_type=client_credential&appid=wx1000000000000001&secret=SECRET", nil)
	call, _ := http.NewRequest("GET", "https://api.weixin.qq.com/cgi-bin/user/info?openid=o1&access_token=ACCESS_TOKEN_0123456789abcdef", nil)
	run := func(rt http.RoundTripper, req *http.Request) func(b *testing.B) {
		return func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				resp, err := rt.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
	}
	if _, err := shared.RoundTrip(exchange); err != nil { // the fetch that keeps the answer
		b.Fatal(err)
	}
	b.Run("exchange answered from Redis", run(shared, exchange))
	b.Run("normal call, sharing on", run(shared, call))
	b.Run("normal call, sharing off", run(unshared, call))
}
