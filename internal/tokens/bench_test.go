package tokens

import (
	"bytes"
	"io"
	"net/http"
	"testing"

	"github.com/quotaware/throttle/internal/redistest"
)

// answering is a base transport that answers every request with body, so
// that the benchmarks measure the wrapper, not a network.
type answering []byte

func (b answering) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: io.NopCloser(bytes.NewReader(b)),
		ContentLength: int64(len(b)), Request: req}, nil
}

// The added cost on a normal request: none while no token was handed out
// (a path comparison), a token read and a map lookup after.
func BenchmarkNormalRequest(b *testing.B) {
	srv := redistest.Start(b)
	s, err := New(srv.Client(b), WithPrefix("bench"))
	if err != nil {
		b.Fatal(err)
	}
	base := answering(`{"errcode":0,"errmsg":"ok"}`)
	req, _ := http.NewRequest("POST", "http://api.weixin.qq.com/cgi-bin/message/custom/send?access_token=ACCESS_TOKEN_0123456789", nil)
	run := func(b *testing.B, rt http.RoundTripper) {
		b.ReportAllocs()
		for b.Loop() {
			resp, _ := rt.RoundTrip(req)
			resp.Body.Close()
		}
	}
	b.Run("base", func(b *testing.B) { run(b, base) })
	b.Run("wrapped", func(b *testing.B) { run(b, s.Wrap(base)) })
	s.remember("OTHER_TOKEN_0123456789", handed{provider: wechat})
	b.Run("wrapped-after-a-token-was-handed-out", func(b *testing.B) { run(b, s.Wrap(base)) })
}

// An exchange answered from Redis: one GET on a loopback Redis, the
// answer opened and its lifetime counted down.
func BenchmarkExchangeFromRedis(b *testing.B) {
	srv := redistest.Start(b)
	s, err := New(srv.Client(b), WithPrefix("bench"))
	if err != nil {
		b.Fatal(err)
	}
	rt := s.Wrap(answering(`{"access_token":"ACCESS_TOKEN_0123456789abcdef","expires_in":7200}`))
	fetch := func() {
		req, _ := http.NewRequest("GET", "http://api.weixin.qq.com/cgi-bin/token?grant_type=client_credential&appid=wx1&secret=SECRET", nil)
		resp, err := rt.RoundTrip(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	fetch()
	b.ReportAllocs()
	for b.Loop() {
		fetch()
	}
	if st := s.Stats(); st.Fetched != 1 {
		b.Fatalf("stats %+v, want one fetch", st)
	}
}

// An exchange answered by Stored, as the Transport asks before its
// limiter: one GET on a loopback Redis, the answer opened and counted down.
func BenchmarkStored(b *testing.B) {
	srv := redistest.Start(b)
	s, err := New(srv.Client(b), WithPrefix("bench"))
	if err != nil {
		b.Fatal(err)
	}
	const u = "http://api.weixin.qq.com/cgi-bin/token?grant_type=client_credential&appid=wx1&secret=SECRET"
	rt := s.Wrap(answering(`{"access_token":"ACCESS_TOKEN_0123456789abcdef","expires_in":7200}`))
	req, _ := http.NewRequest("GET", u, nil)
	resp, err := rt.RoundTrip(req) // the fetch that keeps the answer
	if err != nil {
		b.Fatal(err)
	}
	resp.Body.Close()
	b.ReportAllocs()
	for b.Loop() {
		resp, _, err := s.Stored(req, "wechat")
		if err != nil || resp == nil {
			b.Fatalf("not answered: %v", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}
