package tokens

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotaware/throttle/internal/redistest"
)

// heldWeChat is a WeChat /cgi-bin/token that counts and rotates on
// receipt, as WeChat does, and answers only once answer is called; arrived
// hears of each request as it comes.
type heldWeChat struct {
	*httptest.Server
	issued  atomic.Int32
	arrived chan struct{}
	release chan struct{}
	once    sync.Once
}

// answer lets the requests held, and those to come, be answered.
func (w *heldWeChat) answer() { w.once.Do(func() { close(w.release) }) }

// giveUpOnce sends appid's token exchange to w through c and gives up
// once WeChat holds it (WeChat rotates on receipt): the caller must get
// its context's error at once, not wait for the fetch.
func (w *heldWeChat) giveUpOnce(t *testing.T, c *http.Client, appid string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, w.URL+"/cgi-bin/token?grant_type=client_credential&appid="+appid+"&secret="+secret, nil)
	giveUp(t, c, req, w.arrived, cancel)
}

// giveUp sends req through c, cancels it (cancel) once held says the
// provider has it, and checks that the caller got its context's error
// within 10 s.
func giveUp(t *testing.T, c *http.Client, req *http.Request, held <-chan struct{}, cancel context.CancelFunc) {
	t.Helper()
	gaveUp := make(chan error, 1)
	go func() {
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		gaveUp <- err
	}()
	<-held
	cancel()
	select {
	case err := <-gaveUp:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the caller that gave up got %v, want its context's error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the caller that gave up waited for the fetch")
	}
}

func newHeldWeChat(t *testing.T) *heldWeChat {
	w := &heldWeChat{arrived: make(chan struct{}, 16), release: make(chan struct{})}
	w.Server = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		n := w.issued.Add(1)
		w.arrived <- struct{}{}
		<-w.release
		rw.Header().Set("Content-Type", "application/json; encoding=utf-8")
		fmt.Fprintf(rw, `{"access_token":"TOKEN-%04d-abcdefgh","expires_in":7200}`, n)
	}))
	t.Cleanup(w.Close)
	t.Cleanup(w.answer) // before Close, which waits for the handlers
	return w
}

// A caller that gives up while the fleet's fetch of a rotating exchange is
// in flight is answered at once with its context's error, and the fetch
// goes on for the fleet: WeChat has issued a new token (retiring the one
// before), which is kept, and the lease is held until it is. Before, the
// answer was dropped with its caller and the lease let go at once: the
// next exchange fetched again, and WeChat issued a second token for the
// fleet.
func TestCallerGivingUpLeavesTheRotationToTheFleet(t *testing.T) {
	leavesTheRotationToTheFleet(t, func(ctx context.Context, base string) *http.Request {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/cgi-bin/token?grant_type=client_credential&appid=wxA&secret="+secret, nil)
		return req
	})
}

// A WeChat GET /cgi-bin/token written as an Opaque URL (net/url's idiom
// for a path sent as written: Path is empty, and net/http sends the path
// of Opaque) is the token exchange all the same: told as one, shared by
// the fleet, and known to rotate, so that a caller giving up leaves the
// fetch to the fleet. Read by its Path, it was none of these.
func TestOpaqueWeChatTokenIsARotatingExchange(t *testing.T) {
	opaque := func(ctx context.Context, base string) *http.Request {
		u, _ := url.Parse(base) // a test server's URL, or the one below
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base, nil)
		req.URL = &url.URL{Scheme: u.Scheme, Host: u.Host, Opaque: "//" + u.Host + "/cgi-bin/token",
			RawQuery: "grant_type=client_credential&appid=wxA&secret=" + secret}
		return req
	}
	if req := opaque(context.Background(), "https://api.weixin.qq.com"); req.URL.Path != "" || !IsExchange(req) {
		t.Fatalf("%s (Path %q): not told as a token exchange", req.URL, req.URL.Path)
	}
	leavesTheRotationToTheFleet(t, opaque)
}

// leavesTheRotationToTheFleet runs the exchanges made by tokenReq (a
// WeChat GET /cgi-bin/token of wxA to base) through a Sharer while a
// caller gives up during the fetch.
func leavesTheRotationToTheFleet(t *testing.T, tokenReq func(ctx context.Context, base string) *http.Request) {
	wx := newHeldWeChat(t)
	s, err := New(redistest.Start(t).Client(t), WithPrefix("giveup"))
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: s.Wrap(http.DefaultTransport)}
	get := func(ctx context.Context) (string, error) {
		resp, err := c.Do(tokenReq(ctx, wx.URL))
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	ctx, cancel := context.WithCancel(context.Background())
	giveUp(t, c, tokenReq(ctx, wx.URL), wx.arrived, cancel) // WeChat rotates on receipt
	// Another exchange waits for the fetch still in flight.
	second := make(chan string, 1)
	go func() {
		body, err := get(context.Background())
		if err != nil {
			t.Error(err)
		}
		second <- body
	}()
	for deadline := time.Now().Add(10 * time.Second); s.Stats().Waited < 1; {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v, WeChat issued %d tokens: the next exchange did not wait for the fetch in flight", s.Stats(), wx.issued.Load())
		}
		time.Sleep(time.Millisecond) // polls the counts
	}
	wx.answer()
	body := <-second
	s.bg.Wait()
	if n := wx.issued.Load(); n != 1 || !strings.Contains(body, "TOKEN-0001") {
		t.Fatalf("WeChat issued %d tokens, the next exchange got %s; want the first token, fetched once", n, body)
	}
	if st := s.Stats(); st.Fetched != 1 || st.Shared != 1 {
		t.Fatalf("stats %+v, want 1 fetched and 1 shared", st)
	}
}

// A caller whose context ended before its fetch was sent sends nothing:
// the lease it took is let go at once for the next exchange.
func TestCallerGoneBeforeTheFetchSendsNothing(t *testing.T) {
	wx := newHeldWeChat(t)
	wx.answer()
	rdb := redistest.Start(t).Client(t)
	s, err := New(rdb, WithPrefix("gonebefore"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ctx, sentNothing := WatchSent(ctx)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, wx.URL+"/cgi-bin/token?grant_type=client_credential&appid=wxA&secret="+secret, nil)
	p, _ := s.prepare(req, exchangeFor(req.Method, req.URL.Path))
	if err := rdb.Set(context.Background(), p.key+":lock", "mine", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if resp, err := s.fetch(http.DefaultTransport, req, exchangeFor(req.Method, req.URL.Path), p.k, p.key, "mine"); resp != nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("fetch for a caller gone: %v, %v; want its context's error", resp, err)
	}
	s.bg.Wait() // a fetch sent in the background would have been sent by now
	if n := wx.issued.Load(); n != 0 || !sentNothing.Load() {
		t.Fatalf("%d sent, marked unsent %v; want nothing sent", n, sentNothing.Load())
	}
	if n := rdb.Exists(context.Background(), p.key+":lock").Val(); n != 0 {
		t.Fatal("the lease of a fetch that sent nothing is still held")
	}
}

// The same for a rotating exchange sent alone while Redis stalls: its
// caller gives up, and the answer is still written for the fleet once
// Redis answers.
func TestCallerGivingUpDuringAnAloneRotation(t *testing.T) {
	wx := newHeldWeChat(t)
	f, s, proxy := withProxiedReplica(t)
	proxy.Stall()
	wx.giveUpOnce(t, f.clients[1], "wxA")
	wx.answer()
	proxy.Resume()
	s.bg.Wait()
	if st := s.Stats(); st.Unshared != 1 {
		t.Fatalf("stats %+v, want the exchange sent alone", st)
	}
	if got := f.keptToken(t, "wxA"); got != "TOKEN-0001-abcdefgh" {
		t.Fatalf("the fleet keeps %q, want the token fetched alone for the caller that gave up", got)
	}
}
