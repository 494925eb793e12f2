package tokens

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotaware/throttle/providers/wechat/wechattest"
)

// rotated is a fleet of two replicas whose SDKs were both handed the
// fleet's token (old), after which replica 0's SDK exchanged once the
// kept answer had ended, and WeChat issued a new token (cur), kept now,
// and invalidated old once its grace was over. Replica 1's SDK still holds
// old, as SDKs do until their own cache lapses.
func rotated(t *testing.T, opts ...Option) (f *fleet, old, cur string) {
	t.Helper()
	f = newFleet(t, 2, opts...)
	old = f.fetch(t, 0, "wxA").AccessToken
	if got := f.fetch(t, 1, "wxA").AccessToken; got != old {
		t.Fatalf("replica 1 got %q, want the fleet's token", got)
	}
	// The kept answer ends a Margin before its token.
	if err := f.rdb.Del(context.Background(), f.prefix+":token:"+f.keys(t, "wxA").name).Err(); err != nil {
		t.Fatal(err)
	}
	if cur = f.fetch(t, 0, "wxA").AccessToken; cur == old || cur == "" {
		t.Fatalf("the second fetch answered %q, want a new token", cur)
	}
	f.emu.Revoke(old) // its grace is over
	return f, old, cur
}

// A replica whose SDK holds a token the provider refused sends the SDK's
// later requests with the token the fleet keeps for the same credential:
// the first call is refused as WeChat answered it, the ones after it
// succeed, and nothing is fetched for it. The request the SDK gave is not
// changed.
func TestRefusedTokenIsReplacedByTheFleets(t *testing.T) {
	f, old, cur := rotated(t)
	if code := f.call(t, 1, old); code != wechattest.CodeInvalidToken {
		t.Fatalf("the first call with the refused token: errcode %d, want %d as WeChat answered it", code, wechattest.CodeInvalidToken)
	}
	for i := range 3 {
		if code := f.call(t, 1, old); code != 0 {
			t.Fatalf("call %d with the refused token after the refusal: errcode %d, want 0 (sent with the fleet's)", i, code)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, f.emu.URL+"/cgi-bin/user/info?openid=o1&access_token="+url.QueryEscape(old), nil)
	resp, err := f.clients[1].Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := req.URL.Query().Get("access_token"); got != old {
		t.Fatalf("the caller's request now carries %q, want the token it was given", got)
	}
	st := f.sharers[1].Stats()
	if st.Replaced != 4 || st.Healed != 0 {
		t.Fatalf("replica 1: %d replaced, %d healed; want 4 and 0 (the kept answer is newer than the refused token)", st.Replaced, st.Healed)
	}
	if n := f.emu.Fetches("wxA", "/cgi-bin/token"); n != 2 {
		t.Fatalf("%d fetches at the emulator, want 2", n)
	}
	// Only a host that refused the token is sent the live one. A host that
	// answers anything (a provider's host that has not refused it yet, a
	// proxy the SDK was pointed at) gets the token as it came; the same
	// emulator named otherwise refuses it once, and is sent the live one
	// after that.
	var gotThere []string
	var mu sync.Mutex
	accepting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		gotThere = append(gotThere, r.URL.Query().Get("access_token"))
		mu.Unlock()
		io.WriteString(w, `{"errcode":0,"errmsg":"ok"}`)
	}))
	t.Cleanup(accepting.Close)
	elsewhere := strings.Replace(f.emu.URL, "127.0.0.1", "localhost", 1)
	codeAt := func(base string) int { return f.callAt(t, 1, base, old) }
	for range 2 {
		codeAt(accepting.URL)
	}
	mu.Lock()
	if len(gotThere) != 2 || gotThere[0] != old || gotThere[1] != old {
		t.Fatalf("a host that never refused the token got %q, want the token as the SDK sent it, twice", gotThere)
	}
	mu.Unlock()
	if code := codeAt(elsewhere); code != wechattest.CodeInvalidToken {
		t.Fatalf("the first call to another host that refuses it: errcode %d, want %d", code, wechattest.CodeInvalidToken)
	}
	if code := codeAt(elsewhere); code != 0 {
		t.Fatalf("the next call to that host: errcode %d, want 0 (sent with the fleet's token)", code)
	}
	if n := f.sharers[1].Stats().Replaced; n != 5 {
		t.Fatalf("%d replaced, want 5", n)
	}
	// The replacement is watched in turn: refused, it heals.
	f.emu.Revoke(cur)
	if code := f.call(t, 1, old); code != wechattest.CodeInvalidToken {
		t.Fatalf("with the replacement revoked: errcode %d, want %d", code, wechattest.CodeInvalidToken)
	}
	if st := f.sharers[1].Stats(); st.Healed != 1 {
		t.Fatalf("the refused replacement healed %d times, want 1", st.Healed)
	}
	if a := f.fetch(t, 0, "wxA"); a.AccessToken == cur || a.AccessToken == old {
		t.Fatalf("after the heal the fleet exchanged to %q, want a new token", a.AccessToken)
	}
}

// With no other token kept, a refused token goes as it came, and looking
// for a replacement costs at most one Redis read a second, whatever the
// SDK sends.
func TestNoReplacementSendsTheTokenAsItCameAndReadsRarely(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	f, old, cur := rotated(t, WithClock(clock))
	f.call(t, 1, old)                         // refused: old is known dead
	if code := f.call(t, 1, old); code != 0 { // sent with cur
		t.Fatalf("errcode %d, want 0", code)
	}
	f.emu.Revoke(cur)
	f.call(t, 1, old) // sent with cur, refused: cur heals, nothing is kept
	reads := func() int {
		info, err := f.rdb.Info(context.Background(), "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		// A kept answer is read with GET and PTTL pipelined; PTTL is
		// the Sharer's alone.
		m := regexp.MustCompile(`cmdstat_pttl:calls=(\d+)`).FindStringSubmatch(info)
		if m == nil {
			return 0
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	before := reads()
	for range 20 {
		if code := f.call(t, 1, old); code != wechattest.CodeInvalidToken {
			t.Fatalf("with nothing kept: errcode %d, want %d (the token as it came)", code, wechattest.CodeInvalidToken)
		}
	}
	if n := reads() - before; n > 1 {
		t.Fatalf("%d Redis reads for a replacement within a second, want at most 1", n)
	}
	now.Add(int64(1100 * time.Millisecond))
	before = reads()
	for range 20 {
		f.call(t, 1, old)
	}
	if n := reads() - before; n != 1 {
		t.Fatalf("%d Redis reads for a replacement in the next second, want 1", n)
	}
	if st := f.sharers[1].Stats(); st.Replaced != 2 {
		t.Fatalf("%d replaced, want 2 (before the replacement was refused)", st.Replaced)
	}
}

// A kept answer whose token this replica knows the provider refused (its
// heal capped, so it stays kept) is no replacement: the request goes as it
// came.
func TestRefusedKeptTokenIsNoReplacement(t *testing.T) {
	f, old, cur := rotated(t)
	f.call(t, 1, old)    // refused: old is known dead on replica 1
	f.fetch(t, 1, "wxA") // replica 1 hands cur out
	f.emu.Revoke(cur)    // WeChat invalidates cur too
	// Another token of the credential was healed moments ago: the heal of
	// cur is capped, and cur stays kept.
	heal := f.prefix + ":token:" + f.keys(t, "wxA").name + ":heal"
	if err := f.rdb.HSet(context.Background(), heal, "tag", "another token", "gapEnd", time.Now().Add(time.Hour).UnixMilli()).Err(); err != nil {
		t.Fatal(err)
	}
	if code := f.call(t, 1, cur); code != wechattest.CodeInvalidToken {
		t.Fatalf("errcode %d, want %d", code, wechattest.CodeInvalidToken)
	}
	if st := f.sharers[1].Stats(); st.Capped != 1 {
		t.Fatalf("replica 1: %+v, want its heal capped", st)
	}
	if code := f.call(t, 1, old); code != wechattest.CodeInvalidToken {
		t.Fatalf("errcode %d, want %d: the token as it came", code, wechattest.CodeInvalidToken)
	}
	if st := f.sharers[1].Stats(); st.Replaced != 0 {
		t.Fatalf("%d replaced with a refused token, want 0", st.Replaced)
	}
}

// Calls with a handed-out token race exchanges answered with it, and calls
// with a refused token race one another: every one of those goes with the
// fleet's token, the ones that arrive while the replacement is read
// waiting for that read (run with -race).
func TestWatchedAndReplacedConcurrently(t *testing.T) {
	f, old, _ := rotated(t)
	f.call(t, 1, old)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for range 25 {
				if code := f.call(t, 1, old); code != 0 {
					t.Errorf("errcode %d, want 0", code)
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			for range 25 {
				f.fetch(t, 1, "wxA")
			}
		}()
	}
	wg.Wait()
}

// A token fetched and not kept is watched as a kept one is: the next fetch
// of its credential invalidates it, and the requests its SDK goes on
// sending with it are sent with the fleet's token once WeChat refused it
// (before, refused every time, 40001, for as long as the SDK's own cache
// held it). Not kept here because the fetch's lease lapsed while WeChat
// answered.
func TestUnkeptTokenIsReplacedOnceRefused(t *testing.T) {
	f := newFleet(t, 2)
	key := f.prefix + ":token:" + f.keys(t, "wxA").name
	c := &http.Client{Transport: f.sharers[0].Wrap(takeOver{rdb: f.rdb, lock: key + ":lock", base: http.DefaultTransport})}
	unkept := exchangeWith(t, c, f.emu.URL, "wxA")
	f.rdb.Del(context.Background(), key+":lock") // the other replica's lease, taken over, ends
	kept := f.fetch(t, 1, "wxA").AccessToken
	if kept == unkept || kept == "" {
		t.Fatalf("replica 1 fetched %q, want a new token", kept)
	}
	f.emu.Revoke(unkept)
	expectReplaced(t, f, 0, unkept)
}

// The same for a token exchanged while Redis did not answer, sent alone
// (and kept for the fleet once Redis answered, until its kept answer
// ended).
func TestTokenExchangedWithoutRedisIsReplacedOnceRefused(t *testing.T) {
	f, s, proxy := withProxiedReplica(t)
	proxy.Stall()
	alone := exchangeWith(t, f.clients[1], f.emu.URL, "wxA")
	proxy.Resume()
	if st := s.Stats(); st.Unshared != 1 {
		t.Fatalf("stats %+v, want the exchange sent alone", st)
	}
	s.bg.Wait()
	if err := f.rdb.Del(context.Background(), f.prefix+":token:"+f.keys(t, "wxA").name).Err(); err != nil {
		t.Fatal(err)
	}
	if kept := f.fetch(t, 0, "wxA").AccessToken; kept == alone || kept == "" {
		t.Fatalf("replica 0 fetched %q, want a new token", kept)
	}
	f.emu.Revoke(alone)
	expectReplaced(t, f, 1, alone)
}

// exchangeWith exchanges app's credential through c and returns the token.
func exchangeWith(t *testing.T, c *http.Client, base, app string) string {
	t.Helper()
	resp, err := c.Get(base + "/cgi-bin/token?grant_type=client_credential&appid=" + app + "&secret=" + secret)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`"access_token":"([^"]+)"`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no token in %s", b)
	}
	return string(m[1])
}

// expectReplaced calls with tok, which WeChat refuses, on replica r: the
// first call is refused, the ones after it go with the fleet's token.
func expectReplaced(t *testing.T, f *fleet, r int, tok string) {
	t.Helper()
	if code := f.call(t, r, tok); code != wechattest.CodeInvalidToken {
		t.Fatalf("the first call with the refused token: errcode %d, want %d", code, wechattest.CodeInvalidToken)
	}
	for i := range 2 {
		if code := f.call(t, r, tok); code != 0 {
			t.Fatalf("call %d after the refusal: errcode %d, want 0 (sent with the fleet's token)", i, code)
		}
	}
	if st := f.sharers[r].Stats(); st.Replaced < 1 {
		t.Fatalf("stats %+v, want the refused token replaced", st)
	}
}

// A token whose heal a cap refused (a second invalidation within the gap)
// is healed by a refusal once the gap is over, and the next exchange gets
// a new token. Before, the refusals after it were sent on and nobody
// healed it again: every exchange was handed the refused token until its
// kept answer ended.
func TestCappedHealIsTriedAgain(t *testing.T) {
	const gap = 200 * time.Millisecond
	f := newFleet(t, 2, WithHealLimits(gap, 0))
	first := f.fetch(t, 0, "wxA").AccessToken
	f.emu.Revoke(first)
	if code := f.call(t, 0, first); code != wechattest.CodeInvalidToken {
		t.Fatalf("call with the revoked token: errcode %d", code)
	}
	second := f.fetch(t, 0, "wxA").AccessToken
	if second == first {
		t.Fatal("the heal did not let a new token be fetched")
	}
	f.emu.Revoke(second)
	if code := f.call(t, 0, second); code != wechattest.CodeInvalidToken {
		t.Fatalf("call with the second revoked token: errcode %d", code)
	}
	if st := f.sharers[0].Stats(); st.Capped != 1 || st.Healed != 1 {
		t.Fatalf("stats %+v, want the second heal capped", st)
	}
	// The SDK goes on calling with the refused token; once the gap is over
	// a refusal heals it.
	for deadline := time.Now().Add(5 * time.Second); f.sharers[0].Stats().Healed < 2; {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v: the capped heal was not tried again within 5s", f.sharers[0].Stats())
		}
		f.call(t, 0, second)
		time.Sleep(gap / 4) // the SDK's pace; the condition is the heal
	}
	if got := f.fetch(t, 1, "wxA").AccessToken; got == second || got == "" {
		t.Fatalf("the exchange after the heal answered %q, want a new token", got)
	}
}
