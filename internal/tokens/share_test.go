package tokens

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/providers/wechat/wechattest"
)

const secret = "APPSECRET-7f3e9a"

// fleet is n replicas, each with its own Redis client and Sharer, on one
// Redis, calling one WeChat emulator.
type fleet struct {
	emu     *wechattest.Server
	rdb     *redis.Client
	sharers []*Sharer
	clients []*http.Client
	prefix  string
}

func newFleet(t *testing.T, n int, opts ...Option) *fleet {
	t.Helper()
	srv := redistest.Start(t)
	f := &fleet{rdb: srv.Client(t), prefix: "tok" + strings.ReplaceAll(t.Name(), "/", "_")}
	f.emu = wechattest.NewServer(wechattest.Options{Apps: map[string]string{"wxA": secret, "wxB": secret}})
	t.Cleanup(f.emu.Close)
	for range n {
		s, err := New(srv.Client(t), append([]Option{WithPrefix(f.prefix)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		f.sharers = append(f.sharers, s)
		f.clients = append(f.clients, &http.Client{Transport: s.Wrap(http.DefaultTransport)})
	}
	return f
}

type tokenAnswer struct {
	ErrCode     int    `json:"errcode"`
	AccessToken string `json:"access_token"`
	ExpiresIn   int64  `json:"expires_in"`
	raw         []byte
}

func (f *fleet) fetch(t *testing.T, replica int, app string) tokenAnswer {
	t.Helper()
	resp, err := f.clients[replica].Get(f.emu.URL + "/cgi-bin/token?grant_type=client_credential&appid=" + app + "&secret=" + secret)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a tokenAnswer
	a.raw, _ = io.ReadAll(resp.Body)
	if err := json.Unmarshal(a.raw, &a); err != nil {
		t.Fatalf("%s: %v", a.raw, err)
	}
	return a
}

func (f *fleet) call(t *testing.T, replica int, tok string) int {
	t.Helper()
	return f.callAt(t, replica, f.emu.URL, tok)
}

// callAt is call sent to base, a host other than the emulator's URL.
func (f *fleet) callAt(t *testing.T, replica int, base, tok string) int {
	t.Helper()
	resp, err := f.clients[replica].Post(base+"/cgi-bin/user/info?access_token="+url.QueryEscape(tok), "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a tokenAnswer
	_ = json.NewDecoder(resp.Body).Decode(&a)
	return a.ErrCode
}

// Six replicas exchanging the credentials of two accounts at once cause
// one fetch per account; every replica gets that token, and every call
// with it succeeds.
func TestOneExchangePerCredential(t *testing.T) {
	f := newFleet(t, 6)
	var mu sync.Mutex
	got := map[string]map[string]bool{}
	var wg sync.WaitGroup
	for r := range 6 {
		for _, app := range []string{"wxA", "wxB"} {
			for range 3 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					a := f.fetch(t, r, app)
					mu.Lock()
					defer mu.Unlock()
					if got[app] == nil {
						got[app] = map[string]bool{}
					}
					got[app][a.AccessToken] = true
				}()
			}
		}
	}
	wg.Wait()
	for _, app := range []string{"wxA", "wxB"} {
		if n := f.emu.Fetches(app, "/cgi-bin/token"); n != 1 {
			t.Errorf("%s: %d fetches at the emulator, want 1", app, n)
		}
		if len(got[app]) != 1 {
			t.Errorf("%s: replicas got %d tokens, want 1", app, len(got[app]))
		}
		for tok := range got[app] {
			for r := range 6 {
				if code := f.call(t, r, tok); code != 0 {
					t.Errorf("%s replica %d: errcode %d", app, r, code)
				}
			}
		}
	}
	var st Stats
	for _, s := range f.sharers {
		x := s.Stats()
		st.Fetched += x.Fetched
		st.Shared += x.Shared
		st.Waited += x.Waited
	}
	t.Logf("36 exchanges: %+v", st)
	if st.Fetched != 2 || st.Shared != 34 {
		t.Errorf("stats %+v, want 2 fetched and 34 shared", st)
	}
}

// An answer from Redis is the provider's body byte for byte, but for its
// lifetime counted down to what is left.
func TestSharedAnswerCountsDown(t *testing.T) {
	now := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	f := newFleet(t, 2, WithClock(clock))
	first := f.fetch(t, 0, "wxA")
	mu.Lock()
	now = now.Add(1000 * time.Second)
	mu.Unlock()
	second := f.fetch(t, 1, "wxA")
	want := bytes.Replace(first.raw, []byte(`"expires_in":7200`), []byte(`"expires_in":6200`), 1)
	if !bytes.Equal(second.raw, want) {
		t.Fatalf("shared answer %s, want %s", second.raw, want)
	}
	// Within the margin of its end the token is not handed out: fetched anew.
	mu.Lock()
	now = now.Add(6200*time.Second - 5*time.Minute + time.Second)
	mu.Unlock()
	third := f.fetch(t, 1, "wxA")
	if third.AccessToken == first.AccessToken || third.ExpiresIn != 7200 {
		t.Fatalf("near its end: %s, want a new token", third.raw)
	}
}

// A token revoked at the provider heals with one fetch for the fleet:
// every replica sees 40001, the kept answer is deleted once, and the
// replicas' next exchanges share one new token.
func TestInvalidTokenHealsOnce(t *testing.T) {
	f := newFleet(t, 6)
	var toks []string
	for r := range 6 {
		toks = append(toks, f.fetch(t, r, "wxA").AccessToken)
	}
	f.emu.Revoke(toks[0])
	var wg sync.WaitGroup
	for r := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if code := f.call(t, r, toks[r]); code != wechattest.CodeInvalidToken {
				t.Errorf("replica %d: errcode %d, want 40001", r, code)
			}
			a := f.fetch(t, r, "wxA")
			if a.AccessToken == toks[0] {
				t.Errorf("replica %d got the revoked token again", r)
			}
			if code := f.call(t, r, a.AccessToken); code != 0 {
				t.Errorf("replica %d after healing: errcode %d", r, code)
			}
		}()
	}
	wg.Wait()
	if n := f.emu.Fetches("wxA", "/cgi-bin/token"); n != 2 {
		t.Fatalf("%d fetches at the emulator, want 2 (the first and one to heal)", n)
	}
	healed := int64(0)
	for _, s := range f.sharers {
		healed += s.Stats().Healed
	}
	if healed != 1 {
		t.Fatalf("healed %d times, want 1", healed)
	}
}

// Error answers are never kept; forced stable_token refreshes are never
// answered from Redis.
func TestOnlyGoodAnswersKept(t *testing.T) {
	f := newFleet(t, 2)
	for r := range 2 {
		resp, err := f.clients[r].Get(f.emu.URL + "/cgi-bin/token?grant_type=client_credential&appid=wxA&secret=wrong-secret")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), "40125") {
			t.Fatalf("wrong secret: %s", b)
		}
	}
	if n := len(f.emu.Requests()); n != 2 {
		t.Fatalf("%d requests at the emulator, want 2: an error answer was shared", n)
	}
	stable := func(r int, force bool) string {
		body := fmt.Sprintf(`{"grant_type":"client_credential","appid":"wxA","secret":%q,"force_refresh":%v}`, secret, force)
		resp, err := f.clients[r].Post(f.emu.URL+"/cgi-bin/stable_token", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var a tokenAnswer
		_ = json.NewDecoder(resp.Body).Decode(&a)
		return a.AccessToken
	}
	a := stable(0, false)
	if b := stable(1, false); b != a {
		t.Fatalf("stable token not shared: %q, %q", a, b)
	}
	forced := stable(1, true)
	if forced == a || f.emu.Fetches("wxA", "/cgi-bin/stable_token") != 2 {
		t.Fatalf("forced refresh answered from Redis")
	}
	if b := stable(0, false); b != forced {
		t.Fatalf("after a forced refresh the fleet shares %q, want the forced %q", b, forced)
	}
}

// A forced refresh waits for a fetch in flight before it asks for its new
// token: that fetch, answered before it but kept after it, would put back
// the token the refresh invalidated (it used to go at once, beside it).
func TestForcedRefreshWaitsForTheFetchInFlight(t *testing.T) {
	var lockKey atomic.Pointer[string]
	var rdb atomic.Pointer[redis.Client]
	f := newFleet(t, 1, WithObserver(func(_, result string) {
		if result == Waited {
			// Another replica's fetch ends: its lease goes.
			rdb.Load().Del(context.Background(), *lockKey.Load())
		}
	}))
	rdb.Store(f.rdb)
	k, err := derive(wechat, "/cgi-bin/stable_token", []string{"wxA", secret})
	if err != nil {
		t.Fatal(err)
	}
	key := f.prefix + ":token:" + k.name + ":lock"
	lockKey.Store(&key)
	if err := f.rdb.Set(context.Background(), key, "other-replica", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	body := `{"grant_type":"client_credential","appid":"wxA","secret":"` + secret + `","force_refresh":true}`
	resp, err := f.clients[0].Post(f.emu.URL+"/cgi-bin/stable_token", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if st := f.sharers[0].Stats(); st.Waited != 1 || st.Fetched != 1 {
		t.Fatalf("stats %+v, want one wait for the lease, then one fetch", st)
	}
}

// A replica that took the lease and died holds the others no longer than
// the lease: the next exchange fetches once it has passed.
func TestDeadFetcherHoldsOnlyItsLease(t *testing.T) {
	f := newFleet(t, 1, WithLease(300*time.Millisecond))
	k, err := derive(wechat, "/cgi-bin/token", []string{"wxA", secret})
	if err != nil {
		t.Fatal(err)
	}
	lockKey := f.prefix + ":token:" + k.name + ":lock"
	if err := f.rdb.Set(context.Background(), lockKey, "dead-replica", 300*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	if a := f.fetch(t, 0, "wxA"); a.AccessToken == "" {
		t.Fatalf("no token: %s", a.raw)
	}
	if st := f.sharers[0].Stats(); st.Waited != 1 || st.Fetched != 1 {
		t.Fatalf("stats %+v, want one wait, then one fetch", st)
	}
	// Bounded by the caller's context as well.
	if err := f.rdb.Set(context.Background(), lockKey, "dead-replica", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	f.rdb.Del(context.Background(), f.prefix+":token:"+k.name)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", f.emu.URL+"/cgi-bin/token?grant_type=client_credential&appid=wxA&secret="+secret, nil)
	if _, err := f.clients[0].Do(req); err == nil || ctx.Err() == nil {
		t.Fatalf("a wait past the caller's deadline: err %v", err)
	}
}

// Redis never holds a token or a secret in clear, in any key or value.
func TestRedisHoldsNoTokenInClear(t *testing.T) {
	f := newFleet(t, 2)
	tok := f.fetch(t, 0, "wxA").AccessToken
	f.fetch(t, 1, "wxA")
	ctx := context.Background()
	keys, err := f.rdb.Keys(ctx, "*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("keys %v, %v", keys, err)
	}
	for _, k := range keys {
		v, _ := f.rdb.Get(ctx, k).Result()
		for _, s := range []string{tok, secret, "wxA"} {
			if strings.Contains(k, s) || strings.Contains(v, s) {
				t.Errorf("Redis key %q or its value holds %q in clear", k, s)
			}
		}
	}
}

func TestOptionsNameTheirField(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
		opt  Option
		want string
	}{
		{WithPrefix(""), "WithPrefix"},
		{WithMargin(-time.Second), "WithMargin"},
		{WithLease(0), "WithLease"},
		{WithLease(time.Nanosecond), "at least 10ms"},
		{WithClock(nil), "WithClock"},
	} {
		if _, err := New(srv.Client(t), tc.opt); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want one naming %s", err, tc.want)
		}
	}
	if _, err := New(nil); err == nil {
		t.Error("New(nil) succeeded")
	}
}

// Stored answers an exchange whose answer is kept, and only that: nothing
// kept, another provider's profile, or a forced refresh go on as sent, a
// POST's body replayed whole; an exchange in flight is awaited.
func TestStored(t *testing.T) {
	f := newFleet(t, 2)
	s := f.sharers[1]
	tokenURL := f.emu.URL + "/cgi-bin/token?grant_type=client_credential&appid=wxA&secret=" + secret
	get, _ := http.NewRequest(http.MethodGet, tokenURL, nil)
	if resp, sent, err := s.Stored(get, "wechat"); resp != nil || sent != get || err != nil {
		t.Fatalf("nothing kept: %v %v, want the request sent on", resp, err)
	}
	first := f.fetch(t, 0, "wxA")
	for _, provider := range []string{"wecom", "dingtalk"} {
		if resp, sent, _ := s.Stored(get, provider); resp != nil || sent != get {
			t.Fatalf("matched to %s: answered", provider)
		}
	}
	resp, _, err := s.Stored(get, "wechat")
	if err != nil || resp == nil {
		t.Fatalf("kept: %v %v, want an answer", resp, err)
	}
	b, _ := io.ReadAll(resp.Body)
	if !bytes.Contains(b, []byte(first.AccessToken)) {
		t.Fatalf("answered %s, want the token kept", b)
	}
	if st := s.Stats(); st.Shared != 1 {
		t.Fatalf("stats %+v, want 1 shared", st)
	}

	// A forced refresh goes on, its body whole.
	body := `{"grant_type":"client_credential","appid":"wxA","secret":"` + secret + `","force_refresh":true}`
	post, _ := http.NewRequest(http.MethodPost, f.emu.URL+"/cgi-bin/stable_token", strings.NewReader(body))
	resp, sent, err := s.Stored(post, "wechat")
	if resp != nil || err != nil {
		t.Fatalf("forced refresh answered from Redis")
	}
	if got, _ := io.ReadAll(sent.Body); string(got) != body {
		t.Fatalf("body sent on %q, want %q", got, body)
	}

	// Another replica fetching: Stored waits for its lease, here until
	// the caller gives up.
	other, _ := http.NewRequest(http.MethodGet, strings.Replace(tokenURL, "wxA", "wxB", 1), nil)
	p, _ := s.prepare(other, exchangeFor("GET", "/cgi-bin/token"))
	f.rdb.Set(context.Background(), p.key+":lock", "x", time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, _, err := s.Stored(other.WithContext(ctx), "wechat"); err != context.DeadlineExceeded {
		t.Fatalf("waiting for a fetch in flight: %v, want the context's error", err)
	}
	if st := s.Stats(); st.Waited != 1 {
		t.Fatalf("stats %+v, want 1 waited", st)
	}
}

// Heals of one credential are capped for the fleet: a token invalidated
// again within the gap is not healed (the kept answer stays, no fetch),
// and past the day's count none is; each refusal is counted.
func TestHealsAreCapped(t *testing.T) {
	f := newFleet(t, 2, WithHealLimits(time.Hour, 2))
	revokeAndCall := func() (fetches int) {
		tok := f.fetch(t, 0, "wxA").AccessToken
		f.fetch(t, 1, "wxA") // shared: replica 1 watches the token
		f.emu.Revoke(tok)
		if code := f.call(t, 1, tok); code != wechattest.CodeInvalidToken {
			t.Fatalf("call with the revoked token: errcode %d", code)
		}
		f.fetch(t, 1, "wxA")
		return f.emu.Fetches("wxA", "/cgi-bin/token")
	}
	if n := revokeAndCall(); n != 2 {
		t.Fatalf("first invalidation: %d fetches, want 2 (one to heal)", n)
	}
	if n := revokeAndCall(); n != 2 {
		t.Fatalf("second invalidation within the gap: %d fetches, want still 2", n)
	}
	if st := f.sharers[1].Stats(); st.Healed != 1 || st.Capped != 1 {
		t.Fatalf("stats %+v, want 1 healed and 1 capped", st)
	}
	// The day's count: the gap lifted, the third heal of the day is refused.
	liftGap := func() {
		f.rdb.HDel(context.Background(), f.prefix+":token:"+f.keys(t, "wxA").name+":heal", "gapEnd")
	}
	liftGap()
	if n := revokeAndCall(); n != 3 {
		t.Fatalf("after the gap: %d fetches, want 3", n)
	}
	liftGap()
	if n := revokeAndCall(); n != 3 {
		t.Fatalf("past the day's 2 heals: %d fetches, want still 3", n)
	}
	if st := f.sharers[1].Stats(); st.Healed != 2 || st.Capped != 2 {
		t.Fatalf("stats %+v, want 2 healed and 2 capped", st)
	}
	// The same refused token reported by the other replica is refused as
	// well: the refusal took no gap that would make it read as the heal
	// of the same token in progress.
	tok := f.fetch(t, 0, "wxA").AccessToken
	if code := f.call(t, 0, tok); code != wechattest.CodeInvalidToken {
		t.Fatalf("call with the kept revoked token: errcode %d", code)
	}
	f.fetch(t, 0, "wxA")
	if n := f.emu.Fetches("wxA", "/cgi-bin/token"); n != 3 {
		t.Fatalf("the refused token reported again: %d fetches, want still 3", n)
	}
	if st := f.sharers[0].Stats(); st.Healed != 0 || st.Capped != 1 {
		t.Fatalf("replica 0's stats %+v, want 1 capped", st)
	}
}

// keys derives the keys of app's /cgi-bin/token credential on the fleet's
// emulator.
func (f *fleet) keys(t *testing.T, app string) *keys {
	t.Helper()
	k, err := derive(wechat, "/cgi-bin/token", []string{app, secret})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// takeOver stands for a lease that lapses while the provider answers: as
// the exchange is sent, another replica holds the lease.
type takeOver struct {
	rdb  *redis.Client
	lock string
	base http.RoundTripper
}

func (o takeOver) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := o.rdb.Set(req.Context(), o.lock, "another replica", time.Minute).Err(); err != nil {
		return nil, err
	}
	return o.base.RoundTrip(req)
}

// A fetch whose lease lapsed before its answer came does not keep the
// answer: the replica that took the lease over may have fetched since
// (a forced refresh among them, which invalidates this answer's token),
// and a plain write put the dead token back for the fleet. The caller
// still gets the answer it fetched.
func TestFetchAfterItsLeaseLapsedKeepsNothing(t *testing.T) {
	f := newFleet(t, 1)
	s := f.sharers[0]
	key := f.prefix + ":token:" + f.keys(t, "wxA").name
	c := &http.Client{Transport: s.Wrap(takeOver{rdb: f.rdb, lock: key + ":lock", base: http.DefaultTransport})}
	resp, err := c.Get(f.emu.URL + "/cgi-bin/token?grant_type=client_credential&appid=wxA&secret=" + secret)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Contains(b, []byte("access_token")) {
		t.Fatalf("the caller got %s, want the answer fetched", b)
	}
	if n := f.rdb.Exists(context.Background(), key).Val(); n != 0 {
		t.Fatal("an answer fetched under a lapsed lease was kept")
	}
	if st := s.Stats(); st.Fetched != 0 || st.Unshared != 1 {
		t.Fatalf("stats %+v, want 1 unshared", st)
	}
}

// An exchange that waited in Stored and waits again when sent on is
// counted Waited once.
func TestWaitCountedOnce(t *testing.T) {
	f := newFleet(t, 1)
	s := f.sharers[0]
	ctx := context.Background()
	req, _ := http.NewRequest(http.MethodGet, f.emu.URL+"/cgi-bin/token?grant_type=client_credential&appid=wxA&secret="+secret, nil)
	p, _ := s.prepare(req, exchangeFor("GET", "/cgi-bin/token"))
	lock := p.key + ":lock"
	until := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !cond(); {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 5s", what)
			}
			time.Sleep(time.Millisecond) // polling the sharer's counters
		}
	}
	// Another replica's fetch in flight: Stored waits for it, which ends
	// without an answer.
	f.rdb.Set(ctx, lock, "another", time.Minute)
	type stored struct{ sent *http.Request }
	done := make(chan stored, 1)
	go func() {
		_, sent, _ := s.Stored(req, "wechat")
		done <- stored{sent}
	}()
	until("Stored waits", func() bool { return s.Stats().Waited == 1 })
	f.rdb.Del(ctx, lock)
	sent := (<-done).sent
	// Sent on, it finds a fetch in flight again and waits for it too.
	f.rdb.Set(ctx, lock, "yet another", time.Minute)
	asked := make(chan struct{}, 1)
	sent = sent.WithContext(askedCtx{Context: sent.Context(), asked: asked})
	answered := make(chan error, 1)
	go func() {
		resp, err := s.Wrap(http.DefaultTransport).RoundTrip(sent)
		if err == nil {
			resp.Body.Close()
		}
		answered <- err
	}()
	select {
	case <-asked: // in its first wait
	case <-time.After(10 * time.Second):
		t.Fatal("the exchange sent on did not wait, or did not ask whether it had waited already")
	}
	f.rdb.Del(ctx, lock)
	if err := <-answered; err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Waited != 1 || st.Fetched != 1 {
		t.Fatalf("stats %+v, want 1 waited and 1 fetched", st)
	}
}

// askedCtx tells when the exchange's wait asks whether it was counted
// already.
type askedCtx struct {
	context.Context
	asked chan struct{}
}

func (c askedCtx) Value(k any) any {
	if _, ok := k.(waitedKey); ok {
		select {
		case c.asked <- struct{}{}:
		default:
		}
	}
	return c.Context.Value(k)
}

// One account exchanged through two of the provider's hosts (WeChat's
// api. and api2.weixin.qq.com; here 127.0.0.1 and localhost, one
// emulator) is one credential: one fetch, and both replicas hold the one
// token that works. With a key per host each host fetched, the second
// fetch invalidated the first token, and Redis handed that dead token out
// for its host until a heal.
func TestOneCredentialAcrossHosts(t *testing.T) {
	f := newFleet(t, 2)
	other := strings.Replace(f.emu.URL, "127.0.0.1", "localhost", 1)
	if other == f.emu.URL {
		t.Fatalf("emulator at %s: no second name for its host", f.emu.URL)
	}
	first := f.fetch(t, 0, "wxA")
	resp, err := f.clients[1].Get(other + "/cgi-bin/token?grant_type=client_credential&appid=wxA&secret=" + secret)
	if err != nil {
		t.Fatal(err)
	}
	var second tokenAnswer
	_ = json.NewDecoder(resp.Body).Decode(&second)
	resp.Body.Close()
	if n := f.emu.Fetches("wxA", "/cgi-bin/token"); n != 1 || second.AccessToken != first.AccessToken {
		t.Fatalf("%d fetches, tokens %q and %q; want one fetch and one token", n, first.AccessToken, second.AccessToken)
	}
}

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
