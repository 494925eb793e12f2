package tokens

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle/internal/faultproxy"
	"github.com/quotaware/throttle/providers/wechat/wechattest"
)

// withProxiedReplica is a fleet of one replica (0, opts applied) on Redis
// and a second (1) whose Redis client goes through a fault proxy, bounded as
// the Transport bounds its own. The second's background work is waited for
// when the test ends, after its client is closed (which ends any retry).
func withProxiedReplica(t *testing.T, opts ...Option) (f *fleet, s *Sharer, proxy *faultproxy.Proxy) {
	t.Helper()
	f = newFleet(t, 1, opts...)
	proxy = faultproxy.Start(t, f.rdb.Options().Addr)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	s, err := New(rdb, WithPrefix(f.prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.bg.Wait)
	t.Cleanup(func() { rdb.Close() })
	f.sharers = append(f.sharers, s)
	f.clients = append(f.clients, &http.Client{Transport: s.Wrap(http.DefaultTransport)})
	return f, s, proxy
}

// keptToken is the token of the answer kept for app, "" for none.
func (f *fleet) keptToken(t *testing.T, app string) string {
	t.Helper()
	key := f.prefix + ":token:" + f.keys(t, app).name
	v, err := f.rdb.Get(context.Background(), key).Bytes()
	if errors.Is(err, redis.Nil) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	_, raw, err := f.keys(t, app).open(key, v)
	if err != nil {
		t.Fatal(err)
	}
	toks, _, ok := check(exchangeFor("GET", "/cgi-bin/token"), "/cgi-bin/token", raw)
	if !ok {
		t.Fatalf("kept answer %s does not pass the checks", raw)
	}
	return toks[0].Value
}

// A WeChat /cgi-bin/token exchange sent alone while Redis stalls retires
// the token the fleet keeps, and its answer is written for the fleet once
// Redis answers, in place of the kept one: when WeChat refuses the old
// token, the calls still carrying it go with the new one. Before, the new
// token was never kept: the refusal healed the old one, nothing replaced
// it, and every call failed until some SDK exchanged again.
func TestAloneRotationReplacesTheKeptToken(t *testing.T) {
	f, s, proxy := withProxiedReplica(t)
	kept := f.fetch(t, 0, "wxA").AccessToken
	proxy.Stall()
	alone := exchangeWith(t, f.clients[1], f.emu.URL, "wxA") // a new process on replica 1
	proxy.Resume()
	s.bg.Wait()
	if alone == kept {
		t.Fatal("the exchange sent alone answered the kept token: no rotation")
	}
	if st := s.Stats(); st.Unshared != 1 {
		t.Fatalf("replica 1: %+v, want the exchange sent alone", st)
	}
	if got := f.keptToken(t, "wxA"); got != alone {
		t.Fatalf("the fleet keeps %q, want the token fetched alone", got)
	}
	f.emu.Revoke(kept) // WeChat's 5 minutes of grace are over
	expectReplaced(t, f, 0, kept)
	if st := f.sharers[0].Stats(); st.Healed != 0 {
		t.Fatalf("replica 0: %+v, want nothing healed (the kept answer holds the live token)", st)
	}
	if got := f.fetch(t, 0, "wxA").AccessToken; got != alone {
		t.Fatalf("replica 0's exchange answered %q, want the live token", got)
	}
	if n := f.emu.Fetches("wxA", "/cgi-bin/token"); n != 2 {
		t.Fatalf("%d fetches at WeChat, want 2", n)
	}
}

// An answer sent alone replaces only an older one: a token another replica
// fetched for the fleet after it (Redis answered that replica) is the one
// that lives, and stays kept when the answer sent alone is written late.
func TestAloneRotationLeavesANewerKeptToken(t *testing.T) {
	f, s, proxy := withProxiedReplica(t)
	proxy.Stall()
	alone := exchangeWith(t, f.clients[1], f.emu.URL, "wxA")
	newer := f.fetch(t, 0, "wxA").AccessToken // nothing kept: fetched, and kept
	proxy.Resume()
	s.bg.Wait()
	if newer == alone {
		t.Fatal("no rotation")
	}
	if got := f.keptToken(t, "wxA"); got != newer {
		t.Fatalf("the fleet keeps %q, want the newer %q (the one sent alone was %q)", got, newer, alone)
	}
	if got := exchangeWith(t, f.clients[1], f.emu.URL, "wxA"); got != newer {
		t.Fatalf("replica 1's next exchange answered %q, want the newer token", got)
	}
}

// Written after the fleet's heal of the token it retired, the answer sent
// alone is kept all the same: the refusal left nothing kept, and once the
// write lands the calls still carrying the refused token go with the new
// one (at the next look for a replacement, at most a second later).
func TestAloneRotationWrittenAfterTheHeal(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	f, s, proxy := withProxiedReplica(t, WithClock(clock))
	kept := f.fetch(t, 0, "wxA").AccessToken
	proxy.Stall()
	alone := exchangeWith(t, f.clients[1], f.emu.URL, "wxA")
	if alone == kept {
		t.Fatal("no rotation")
	}
	f.emu.Revoke(kept)
	for range 2 {
		if code := f.call(t, 0, kept); code != wechattest.CodeInvalidToken {
			t.Fatalf("with nothing kept but the refused token: errcode %d, want %d", code, wechattest.CodeInvalidToken)
		}
	}
	if st := f.sharers[0].Stats(); st.Healed != 1 {
		t.Fatalf("replica 0: %+v, want the refused token healed", st)
	}
	if got := f.keptToken(t, "wxA"); got != "" {
		t.Fatalf("the fleet keeps %q, want nothing after the heal", got)
	}
	proxy.Resume()
	s.bg.Wait()
	if got := f.keptToken(t, "wxA"); got != alone {
		t.Fatalf("the fleet keeps %q, want the token fetched alone", got)
	}
	now.Add(int64(lookEvery + 100*time.Millisecond)) // the next look for a replacement is due
	for i := range 3 {
		if code := f.call(t, 0, kept); code != 0 {
			t.Fatalf("call %d: errcode %d, want 0 (sent with the token fetched alone)", i, code)
		}
	}
}

// failKeep fails every SET, as a keep that was not answered within its
// bound; scripts (the later write, the lease's) go through.
type failKeep struct{}

func (failKeep) DialHook(next redis.DialHook) redis.DialHook { return next }
func (failKeep) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "set" {
			err := errors.New("simulated: keep not answered within 250 ms")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}
func (failKeep) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A rotating exchange fetched for the fleet whose keep failed is written
// afterwards, as one sent alone is: its token retired the one before, and
// left unkept, the next exchange on any replica fetched again and retired
// it in turn.
func TestRotationWhoseKeepFailedIsWrittenLater(t *testing.T) {
	f := newFleet(t, 1)
	rdb := redis.NewClient(&redis.Options{Addr: f.rdb.Options().Addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	rdb.AddHook(failKeep{})
	s, err := New(rdb, WithPrefix(f.prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.bg.Wait)
	t.Cleanup(func() { rdb.Close() })
	c := &http.Client{Transport: s.Wrap(http.DefaultTransport)}
	fetched := exchangeWith(t, c, f.emu.URL, "wxA")
	s.bg.Wait()
	if st := s.Stats(); st.Fetched != 0 || st.Unshared != 1 {
		t.Fatalf("stats %+v, want the answer not kept by the fetch", st)
	}
	if got := f.fetch(t, 0, "wxA").AccessToken; got != fetched {
		t.Fatalf("replica 0's exchange answered %q, want the token fetched", got)
	}
	if n := f.emu.Fetches("wxA", "/cgi-bin/token"); n != 1 {
		t.Fatalf("%d fetches at WeChat, want 1", n)
	}
}

// An exchange that rotates nothing (WeChat's stable_token answers the
// same token until it is renewed) sent alone is not written afterwards:
// its answer retired no token, and the fleet's next fetch keeps one.
func TestAloneExchangeThatDoesNotRotateIsNotWritten(t *testing.T) {
	f, s, proxy := withProxiedReplica(t)
	proxy.Stall()
	resp, err := f.clients[1].Post(f.emu.URL+"/cgi-bin/stable_token", "application/json",
		strings.NewReader(`{"grant_type":"client_credential","appid":"wxA","secret":"`+secret+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	proxy.Resume()
	s.bg.Wait()
	if st := s.Stats(); st.Unshared != 1 {
		t.Fatalf("stats %+v, want the exchange sent alone", st)
	}
	k, err := derive(wechat, "/cgi-bin/stable_token", []string{"wxA", secret})
	if err != nil {
		t.Fatal(err)
	}
	if n := f.rdb.Exists(context.Background(), f.prefix+":token:"+k.name).Val(); n != 0 {
		t.Fatal("a stable_token answer sent alone was written for the fleet")
	}
}
