package throttle_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/apps"
	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/limitertest"
	"github.com/quotaware/throttle/providers/dingtalk"
	"github.com/quotaware/throttle/providers/wechat"
	"github.com/quotaware/throttle/providers/wechat/wechattest"
)

// A base that answers (nil, nil) breaks the RoundTripper contract; net/http's
// Client makes an error of it, and so does the Transport, where classifying
// the missing answer panicked.
func TestBaseAnsweringNothingIsAnError(t *testing.T) {
	for name, p := range map[string]func() *throttle.Transport{
		"test profile": func() *throttle.Transport {
			return throttle.MustNew(throttle.WithoutTelemetry(), throttle.WithLimiter(limiter.NewMemory()),
				throttle.WithProfiles(testProfile("p", mustRule(t, 100, time.Second))), throttle.WithBase(nothing()))
		},
		"dingtalk": func() *throttle.Transport {
			return throttle.MustNew(throttle.WithoutTelemetry(), throttle.WithLimiter(limiter.NewMemory()), throttle.WithBase(nothing()),
				throttle.WithProfiles(dingtalk.MustNew(dingtalk.Config{Hosts: []string{"oapi.dingtalk.com"}, Apps: []dingtalk.App{{AppKey: "dingA"}}}).Profile()))
		},
	} {
		tr := p()
		req, _ := http.NewRequest(http.MethodPost, "https://oapi.dingtalk.com/topapi/v2/user/get?access_token=x", strings.NewReader("{}"))
		if name == "test profile" {
			req.URL.Host = "p"
		}
		resp, err := tr.RoundTrip(req)
		if resp != nil || err == nil || !strings.Contains(err.Error(), "neither a response nor an error") {
			t.Errorf("%s: RoundTrip = %v, %v; want no response and the base's fault named", name, resp, err)
		}
		tr.Close()
	}
}

func nothing() http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.Body != nil {
			r.Body.Close()
		}
		return nil, nil
	})
}

// WeChat's GET /cgi-bin/token rotates the account's token on every call,
// so it is never resent, however the SDK spells its path: "//cgi-bin/token"
// (a base URL ending in "/") is the same exchange to WeChat's front end and
// to the catalog, and used to be resent after a 502 as an idempotent GET.
func TestRotatingExchangeIsNotResentHoweverSpelled(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"access_token":"ACCESS_TOKEN_0123456789","expires_in":7200}`)
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	tr := throttle.MustNew(throttle.WithoutTelemetry(), throttle.WithLimiter(limiter.NewMemory()),
		throttle.WithRetry(throttle.RetryPolicy{MinBackoff: time.Millisecond}),
		throttle.WithProfiles(wechat.MustNew(wechat.Config{Hosts: []string{u.Hostname()}, Apps: []wechat.App{{AppID: fleetApps[0]}}}).Profile()))
	defer tr.Close()
	for _, p := range []string{"/cgi-bin/token", "//cgi-bin/token", "/cgi-bin/token/", "/cgi-bin//token"} {
		n.Store(0)
		resp, err := (&http.Client{Transport: tr}).Get(srv.URL + p + "?grant_type=client_credential&appid=" + fleetApps[0] + "&secret=s")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if n.Load() != 1 || resp.StatusCode != http.StatusBadGateway {
			t.Errorf("%s: sent %d times (answer %d), want once, its 502 returned", p, n.Load(), resp.StatusCode)
		}
	}
}

// countedBody is a request body that counts its closes.
type countedBody struct {
	io.Reader
	closes *atomic.Int64
}

func (b countedBody) Close() error { b.closes.Add(1); return nil }

// A token exchange answered from Redis closes the caller's body once, with
// the app book learning from it too (the answer closed it, then the book's
// copy closed it again).
func TestExchangeAnsweredFromRedisClosesTheBodyOnce(t *testing.T) {
	srv := redistest.Shared(t)
	emu := wechattest.NewServer(wechattest.Options{Apps: map[string]string{fleetApps[0]: fleetSecret}})
	defer emu.Close()
	u, _ := url.Parse(emu.URL)
	set := wechat.MustNew(wechat.Config{Hosts: []string{u.Hostname()}, Apps: []wechat.App{{AppID: fleetApps[0]}}})
	body := `{"grant_type":"client_credential","appid":"` + fleetApps[0] + `","secret":"` + fleetSecret + `"}`
	for _, withApps := range []bool{false, true} {
		prefix := limitertest.Group(t)
		var got []string
		for replica := range 2 {
			opts := []throttle.Option{throttle.WithLimiter(limiter.MustNewShared(srv.Client(t), limiter.SharedConfig{Prefix: prefix})),
				throttle.WithProfiles(set.Profile()), throttle.WithoutTelemetry()}
			if withApps {
				opts = append(opts, throttle.WithApps(apps.Config{Key: []byte("0123456789abcdef0123456789abcdef")}))
			}
			tr := throttle.MustNew(opts...)
			var closes atomic.Int64
			req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, emu.URL+"/cgi-bin/stable_token", nil)
			req.Body, req.ContentLength = countedBody{strings.NewReader(body), &closes}, int64(len(body))
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			got = append(got, string(b))
			// The second replica's answer comes from Redis, closed within
			// RoundTrip; the first one's body net/http may close later.
			if n := closes.Load(); replica == 1 && n != 1 || n > 1 {
				t.Errorf("apps %v, replica %d: the caller's body closed %d times, want once", withApps, replica, n)
			}
			tr.Close()
		}
		if got[0] != got[1] || !strings.Contains(got[1], `"access_token"`) {
			t.Errorf("apps %v: answers %q, want the second from the first's", withApps, got)
		}
	}
}

// orderedBody notes whether it was read before the base began sending.
type orderedBody struct {
	io.Reader
	sending, early *atomic.Bool
}

func (b orderedBody) Read(p []byte) (int, error) {
	if !b.sending.Load() {
		b.early.Store(true)
	}
	return b.Reader.Read(p)
}

func (b orderedBody) Close() error { return nil }

// An upload that says it is longer than a retry keeps (1 MiB) and has no
// GetBody is streamed to the base as it comes, never copied first, and
// arrives whole.
func TestLongUploadIsStreamedUncopied(t *testing.T) {
	var sending, early atomic.Bool
	var got atomic.Int64
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		sending.Store(true)
		n, _ := io.Copy(io.Discard, r.Body)
		got.Store(n)
		return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
	})
	tr := throttle.MustNew(throttle.WithoutTelemetry(), throttle.WithLimiter(limiter.NewMemory()), throttle.WithBase(base),
		throttle.WithProfiles(testProfile("p", mustRule(t, 100, time.Second))))
	defer tr.Close()
	const size = 3 << 20
	req, _ := http.NewRequest(http.MethodPost, "http://p/media/upload", nil)
	req.Body = orderedBody{io.LimitReader(zeros{}, size), &sending, &early}
	req.ContentLength = size
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if early.Load() || got.Load() != size {
		t.Errorf("read before sending: %v; the base got %d bytes, want %d", early.Load(), got.Load(), size)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }
