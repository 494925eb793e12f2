package tokens

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle/internal/faultproxy"
	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/providers/wechat/wechattest"
)

// Redis down, stalled or stalling mid-fetch: an exchange is sent alone,
// after bounded Redis calls, and its answer given.

// With Redis down each exchange is sent as it came.
func TestRedisDownExchangesAlone(t *testing.T) {
	emu := wechattest.NewServer(wechattest.Options{})
	defer emu.Close()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer rdb.Close()
	s, err := New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: s.Wrap(http.DefaultTransport)}
	for range 2 {
		resp, err := c.Get(emu.URL + "/cgi-bin/token?grant_type=client_credential&appid=wxA&secret=x")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if n := emu.Fetches("wxA", "/cgi-bin/token"); n != 2 || s.Stats().Unshared != 2 {
		t.Fatalf("%d fetches, stats %+v; want 2 sent as they came", n, s.Stats())
	}
}

// With Redis down, Stored answers nothing and sends the request on, at
// once and without an error.
func TestStoredRedisDown(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer rdb.Close()
	s, err := New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, "http://api.weixin.qq.com/cgi-bin/token?grant_type=client_credential&appid=wxA&secret=x", nil)
	if resp, sent, err := s.Stored(req, "wechat"); resp != nil || sent != req || err != nil {
		t.Fatalf("Redis down: %v %v, want the request sent on", resp, err)
	}
}

// A Redis that takes connections and never answers (stalled, or a network
// that drops its replies) costs an exchange a bounded delay, and the
// exchange is sent alone: each of Wrap's Redis calls waited as long as
// go-redis's own timeouts, about 5 s in all, so a caller with a 2 s
// deadline got nothing though the provider was there.
func TestStalledRedisExchangesAlone(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, c) }() // reads, never answers
		}
	}()
	emu := wechattest.NewServer(wechattest.Options{})
	defer emu.Close()
	rdb := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), MaxRetries: -1, ContextTimeoutEnabled: true}) // as the Transport asks
	defer rdb.Close()
	s, err := New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, emu.URL+"/cgi-bin/token?grant_type=client_credential&appid=wxA&secret=x", nil)
	resp, err := (&http.Client{Transport: s.Wrap(http.DefaultTransport)}).Do(req)
	if err != nil {
		t.Fatalf("exchange with Redis stalled: %v, want it sent alone", err)
	}
	resp.Body.Close()
	if n := emu.Fetches("wxA", "/cgi-bin/token"); n != 1 || s.Stats().Unshared != 1 {
		t.Fatalf("%d fetches, stats %+v; want 1 sent alone", n, s.Stats())
	}
}

// A Redis that stops answering once the lease is taken (while the provider
// answers) holds the caller no longer than an exchange's bounded Redis
// calls: reading the lease back, keeping the answer and letting the lease
// go each waited up to 3 s, 7.5 s in all, past a caller's 2 s deadline.
// The caller gets the provider's answer, not kept.
func TestRedisStalledDuringTheFetch(t *testing.T) {
	srv := redistest.Start(t)
	var stalled atomic.Bool
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // a proxy to the Redis whose answers stop once stalled
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", srv.Addr)
			if err != nil {
				c.Close()
				continue
			}
			go func() { _, _ = io.Copy(up, c) }()
			go func() {
				buf := make([]byte, 32<<10)
				for {
					n, err := up.Read(buf)
					if err != nil {
						return
					}
					if !stalled.Load() {
						_, _ = c.Write(buf[:n])
					}
				}
			}()
		}
	}()
	emu := wechattest.NewServer(wechattest.Options{Apps: map[string]string{"wxA": secret}})
	defer emu.Close()
	rdb := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), MaxRetries: -1, ContextTimeoutEnabled: true})
	defer rdb.Close()
	s, err := New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		stalled.Store(true) // the lease is taken: Redis answers no more
		return http.DefaultTransport.RoundTrip(r)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, emu.URL+"/cgi-bin/token?grant_type=client_credential&appid=wxA&secret="+secret, nil)
	resp, err := s.Wrap(base).RoundTrip(req)
	if err != nil || ctx.Err() != nil {
		t.Fatalf("exchange with Redis stalled during the fetch: %v (deadline passed: %v), want the provider's answer within the caller's 2 s", err, ctx.Err())
	}
	resp.Body.Close()
	if st := s.Stats(); st.Fetched != 0 || st.Unshared != 1 {
		t.Fatalf("stats %+v, want the answer given, not kept", st)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

// failFirstRenew fails the first renewal of a lease, as one that could
// not be sent within its bound would.
type failFirstRenew struct{ n atomic.Int32 }

func (h *failFirstRenew) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *failFirstRenew) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if a := cmd.Args(); len(a) > 1 && cmd.Name() == "eval" && strings.Contains(a[1].(string), "PEXPIRE") && h.n.Add(1) == 1 {
			err := errors.New("simulated: renewal not sent within 250 ms (pool wait / dial)")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}
func (h *failFirstRenew) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// One renewal that fails (each is bounded, 250 ms) leaves the lease to
// the next: renewals every half lease put the next one as the lease
// ended, so a slow provider's answer was given but not kept (2 runs in 3),
// and another replica fetched again.
func TestOneMissedRenewalKeepsTheLease(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	defer rdb.Close()
	rdb.AddHook(&failFirstRenew{})
	emu := wechattest.NewServer(wechattest.Options{Apps: map[string]string{"wxA": secret}})
	defer emu.Close()
	s, err := New(rdb, WithLease(400*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		time.Sleep(700 * time.Millisecond) // a slow provider, within maxLeaseHold
		return http.DefaultTransport.RoundTrip(r)
	})
	req, _ := http.NewRequest(http.MethodGet, emu.URL+"/cgi-bin/token?grant_type=client_credential&appid=wxA&secret="+secret, nil)
	resp, err := s.Wrap(base).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if st := s.Stats(); st.Fetched != 1 {
		t.Errorf("stats %+v: one failed renewal lost the lease, the answer was not kept", st)
	}
}

// Redis takes the lease, and the reply is lost to a reset connection:
// go-redis sends the take again (its default retries). A SET NX sent so
// answered that the lease was held (before), by this very exchange, which
// then waited the lease out with no fetch in flight.
func TestLeaseTakenWhoseReplyWasLost(t *testing.T) {
	srv := redistest.Shared(t)
	proxy := faultproxy.Start(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr()}) // the client's own retries
	t.Cleanup(func() { rdb.Close() })
	s, err := New(rdb, WithPrefix("lostreply"))
	if err != nil {
		t.Fatal(err)
	}
	direct := srv.Client(t)
	ctx := context.Background()
	key := "lostreply:" + t.Name()
	lock := key + ":lock"
	direct.Del(ctx, lock) // a lease an earlier run left would read as taken at once
	proxy.HoldRepliesAfter([]byte(lock))
	done := make(chan error, 1)
	var got bool
	go func() {
		var err error
		got, _, err = s.take(ctx, key, "mine", false)
		done <- err
	}()
	// Redis has run the take once the lease is there; its reply is held.
	for direct.Get(ctx, lock).Val() != "mine" {
		select {
		case err := <-done:
			t.Fatalf("the take ended before Redis ran it: %v", err)
		case <-time.After(time.Millisecond):
		}
	}
	proxy.ResetAll()
	proxy.Resume()
	if err := <-done; err != nil {
		t.Fatalf("take: %v", err)
	}
	if !got {
		t.Fatal("the take sent again answered that the lease was held: it is this exchange's")
	}
	if ok, _, err := s.take(ctx, key, "another", false); ok || err != nil {
		t.Fatalf("another exchange took the held lease: %v %v", ok, err)
	}
}
