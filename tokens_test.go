package throttle_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/apps"
	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/limitertest"
	"github.com/quotaware/throttle/providers/wechat"
	"github.com/quotaware/throttle/providers/wechat/wechattest"
)

// tokenFleet is replicas of a service calling two WeChat accounts, each
// through its own Transport on one Redis.
type tokenFleet struct {
	emu     *wechattest.Server
	clients []*http.Client
}

const fleetSecret = "FLEETSECRET-61c0d2"

// fleetEmulator is a WeChat emulator knowing the first fleet account,
// closed with the test.
func fleetEmulator(t *testing.T) *wechattest.Server {
	emu := wechattest.NewServer(wechattest.Options{Apps: map[string]string{fleetApps[0]: fleetSecret}})
	t.Cleanup(emu.Close)
	return emu
}

// fleetTokenURL is the first fleet account's /cgi-bin/token exchange at emu.
func fleetTokenURL(emu *wechattest.Server) string {
	return emu.URL + "/cgi-bin/token?grant_type=client_credential&appid=" + fleetApps[0] + "&secret=" + fleetSecret
}

var fleetApps = []string{"wx1000000000000001", "wx2000000000000002"}

func newTokenFleet(t *testing.T, replicas int, opts ...throttle.Option) *tokenFleet {
	t.Helper()
	srv := redistest.Shared(t)
	prefix := limitertest.Group(t)
	// A replaced token stops working at once after the fetch that replaced
	// it: WeChat's 5 minutes, shortened so that replicas fetching for
	// themselves invalidate one another within the test.
	f := &tokenFleet{emu: wechattest.NewServer(wechattest.Options{
		Apps:       map[string]string{fleetApps[0]: fleetSecret, fleetApps[1]: fleetSecret},
		TokenGrace: time.Nanosecond,
	})}
	t.Cleanup(f.emu.Close)
	u, _ := url.Parse(f.emu.URL)
	set := wechat.MustNew(wechat.Config{
		Hosts: []string{u.Hostname()},
		Apps:  []wechat.App{{AppID: fleetApps[0]}, {AppID: fleetApps[1]}},
	})
	for range replicas {
		tr := throttle.MustNew(append([]throttle.Option{throttle.WithLimiter(limiter.MustNewShared(srv.Client(t), limiter.SharedConfig{Prefix: prefix})),
			throttle.WithProfiles(set.Profile())}, opts...)...)
		t.Cleanup(func() { tr.Close() })
		f.clients = append(f.clients, &http.Client{Transport: tr})
	}
	return f
}

// token is the first fleet account's access token as replica's exchange
// answers it.
func (f *tokenFleet) token(t *testing.T, replica int) string {
	t.Helper()
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	resp, err := f.clients[replica].Get(fleetTokenURL(f.emu))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&tok); err != nil || tok.AccessToken == "" {
		t.Fatalf("token exchange: %+v %v", tok, err)
	}
	return tok.AccessToken
}

// sdk is what an SDK does with a fresh per-process cache: fetch a token,
// call with it, and fetch again when the provider calls it invalid.
func (f *tokenFleet) sdk(t *testing.T, replica int, app string, calls int) (invalid int) {
	get := func(u string, v any) {
		resp, err := f.clients[replica].Get(u)
		if err != nil {
			t.Error(err)
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if err := json.Unmarshal(b, v); err != nil {
			t.Errorf("%s: %v", b, err)
		}
	}
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	get(f.emu.URL+"/cgi-bin/token?grant_type=client_credential&appid="+app+"&secret="+fleetSecret, &tok)
	for range calls {
		var a struct {
			ErrCode int `json:"errcode"`
		}
		get(f.emu.URL+"/cgi-bin/user/info?openid=o1&access_token="+url.QueryEscape(tok.AccessToken), &a)
		if a.ErrCode == wechattest.CodeInvalidToken {
			invalid++
			get(f.emu.URL+"/cgi-bin/token?grant_type=client_credential&appid="+app+"&secret="+fleetSecret, &tok)
		}
	}
	return invalid
}

// restart runs rounds of every replica recreating its SDK client for both
// accounts, staggered as rolling restarts are, and returns the
// invalid-token answers.
func (f *tokenFleet) restart(t *testing.T, rounds int) int {
	var mu sync.Mutex
	invalid := 0
	for range rounds {
		var wg sync.WaitGroup
		for r := range f.clients {
			for _, app := range fleetApps {
				wg.Add(1)
				go func() {
					defer wg.Done()
					n := f.sdk(t, r, app, 3)
					mu.Lock()
					invalid += n
					mu.Unlock()
				}()
			}
		}
		wg.Wait()
	}
	return invalid
}

// Six replicas restarting ten times each, two accounts: one exchange per
// account at the provider for the fleet, and no invalid-token answer. A
// token revoked at the provider then heals with one fetch for the fleet.
// Each replica fetching for itself (before): a fetch per replica and
// restart, and replicas invalidating one another's tokens.
func TestSharedTokensAcrossReplicas(t *testing.T) {
	f := newTokenFleet(t, 6)
	start := time.Now()
	if n := f.restart(t, 10); n != 0 {
		t.Errorf("%d invalid-token answers, want 0", n)
	}
	for _, app := range fleetApps {
		if n := f.emu.Fetches(app, "/cgi-bin/token"); n != 1 {
			t.Errorf("%s: %d token fetches at the provider, want 1", app, n)
		}
	}
	t.Logf("6 replicas x 10 restarts x 2 accounts: fetches %d + %d, %v",
		f.emu.Fetches(fleetApps[0], "/cgi-bin/token"), f.emu.Fetches(fleetApps[1], "/cgi-bin/token"), time.Since(start).Round(time.Millisecond))

	// Revoke the first account's token: every replica sees 40001 once,
	// and the fleet fetches one new token.
	f.emu.Revoke(f.token(t, 0))
	invalid := f.restart(t, 3)
	t.Logf("after a revocation: %d invalid-token answers, fetches %d", invalid, f.emu.Fetches(fleetApps[0], "/cgi-bin/token"))
	if n := f.emu.Fetches(fleetApps[0], "/cgi-bin/token"); n != 2 {
		t.Errorf("after a revocation: %d fetches, want 2 (one to heal)", n)
	}
	if invalid == 0 || invalid > 12 {
		t.Errorf("after a revocation: %d invalid-token answers, want 1 to 12 (one per replica's SDK client at most)", invalid)
	}
	if n := f.emu.Fetches(fleetApps[1], "/cgi-bin/token"); n != 1 {
		t.Errorf("the other account: %d fetches, want 1", n)
	}
}

// WithoutSharedTokens turns the sharing off: every replica fetches.
func TestWithoutSharedTokens(t *testing.T) {
	f := newTokenFleet(t, 2, throttle.WithoutSharedTokens())
	for r := range 2 {
		f.sdk(t, r, fleetApps[0], 0)
	}
	if n := f.emu.Fetches(fleetApps[0], "/cgi-bin/token"); n != 2 {
		t.Fatalf("%d fetches, want 2", n)
	}
}

// An exchange answered from Redis takes no slot of the exchange's own
// rules: with /cgi-bin/token quotas of 2 a day per account, two replicas
// exchange 20 times for one account (one fetch at WeChat, the rest shared)
// and none is refused. Charged a slot each (before), the third exchange was
// refused while WeChat had counted one.
func TestSharedExchangeTakesNoSlot(t *testing.T) {
	srv := redistest.Shared(t)
	prefix := limitertest.Group(t)
	emu := fleetEmulator(t)
	u, _ := url.Parse(emu.URL)
	quota := func() map[string]int { return map[string]int{"/cgi-bin/token": 2} }
	set := wechat.MustNew(wechat.Config{Hosts: []string{u.Hostname()},
		Unknown: wechat.App{Daily: quota(), NoDefaultQuotas: true},
		Apps:    []wechat.App{{AppID: fleetApps[0], Daily: quota(), NoDefaultQuotas: true}}})
	var clients []*http.Client
	for range 2 {
		tr := throttle.MustNew(throttle.WithLimiter(limiter.MustNewShared(srv.Client(t), limiter.SharedConfig{Prefix: prefix})),
			throttle.WithProfiles(set.Profile()), throttle.WithMaxWait(50*time.Millisecond))
		t.Cleanup(func() { tr.Close() })
		clients = append(clients, &http.Client{Transport: tr})
	}
	for i := range 20 {
		resp, err := clients[i%2].Get(fleetTokenURL(emu))
		if err != nil {
			t.Fatalf("exchange %d refused: %v", i+1, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), `"access_token"`) {
			t.Fatalf("exchange %d: %s", i+1, b)
		}
	}
	if n := emu.Fetches(fleetApps[0], "/cgi-bin/token"); n != 1 {
		t.Fatalf("%d fetches at WeChat, want 1", n)
	}
}

// throttle.tokens.replaced counts, by provider alone, the requests sent
// with the fleet's token in place of one the provider refused: here
// replica 1's SDK keeps the token WeChat revoked after replica 0 healed it
// and fetched anew.
func TestTokenReplacedMetric(t *testing.T) {
	o := newObservability(t)
	f := newTokenFleet(t, 2, o.opts...)
	old := f.token(t, 0)
	if got := f.token(t, 1); got != old {
		t.Fatalf("replica 1 was handed %q, want the fleet's token", got)
	}
	call := func(replica int, tok string) int {
		t.Helper()
		resp, err := f.clients[replica].Get(f.emu.URL + "/cgi-bin/user/info?openid=o1&access_token=" + url.QueryEscape(tok))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var a struct {
			ErrCode int `json:"errcode"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
			t.Fatal(err)
		}
		return a.ErrCode
	}
	f.emu.Revoke(old)
	if code := call(0, old); code != wechattest.CodeInvalidToken { // replica 0 heals...
		t.Fatalf("errcode %d, want %d", code, wechattest.CodeInvalidToken)
	}
	if cur := f.token(t, 0); cur == old { // ...and fetches anew
		t.Fatal("the fleet kept the revoked token")
	}
	if code := call(1, old); code != wechattest.CodeInvalidToken { // refused on replica 1 too
		t.Fatalf("errcode %d, want %d", code, wechattest.CodeInvalidToken)
	}
	for range 2 {
		if code := call(1, old); code != 0 {
			t.Fatalf("errcode %d, want 0: sent with the fleet's token", code)
		}
	}
	m, ok := o.metrics(t)["throttle.tokens.replaced"]
	if !ok || m.Unit != "{request}" || m.Description == "" {
		t.Fatalf("throttle.tokens.replaced: %+v", m)
	}
	if got := counts(t, m, "provider"); len(got) != 1 || got["wechat"] != 2 {
		t.Fatalf("throttle.tokens.replaced by provider = %v, want wechat: 2", got)
	}
	for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
		if dp.Attributes.Len() != 1 {
			t.Fatalf("attributes %v, want the provider alone", dp.Attributes.ToSlice())
		}
	}
	if got := counts(t, o.metrics(t)["throttle.tokens.exchanges"], "result"); got["replaced"] != 0 {
		t.Fatalf("throttle.tokens.exchanges counts replacements: %v", got)
	}
}

// throttle.tokens.exchanges counts the fleet's exchanges by provider and
// result: a fetch, an answer from Redis, a token the provider refused
// (healed) and the fetch that replaced it. No attribute holds a token or
// a secret.
func TestTokenExchangesMetric(t *testing.T) {
	o := newObservability(t)
	f := newTokenFleet(t, 2, o.opts...)
	f.sdk(t, 0, fleetApps[0], 0) // fetched
	f.sdk(t, 1, fleetApps[0], 0) // shared
	tok := f.token(t, 1)         // shared
	f.emu.Revoke(tok)
	if n := f.sdk(t, 1, fleetApps[0], 1); n != 1 { // shared, healed, fetched
		t.Fatalf("%d invalid-token answers, want 1", n)
	}
	m, ok := o.metrics(t)["throttle.tokens.exchanges"]
	if !ok || m.Unit != "{exchange}" || m.Description == "" {
		t.Fatalf("throttle.tokens.exchanges: %+v", m)
	}
	want := map[string]int64{"fetched": 2, "shared": 3, "healed": 1}
	if got := counts(t, m, "result"); !maps.Equal(got, want) {
		t.Fatalf("throttle.tokens.exchanges by result = %v, want %v", got, want)
	}
	if got := counts(t, m, "provider"); len(got) != 1 || got["wechat"] != 6 {
		t.Fatalf("throttle.tokens.exchanges by provider = %v, want wechat: 6", got)
	}
	for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
		for _, kv := range dp.Attributes.ToSlice() {
			if v := kv.Value.Emit(); strings.Contains(v, tok) || strings.Contains(v, fleetSecret) || strings.Contains(v, fleetApps[0]) {
				t.Fatalf("attribute %s=%q holds a credential", kv.Key, v)
			}
		}
	}
}

// A heal the caps refuse (a second token of one credential invalidated
// within 30 s, as replicas outside the fleet's sharing do) is counted as
// capped and warned about once a minute with the likely causes: past the
// day's cap the provider refuses every call with the kept token until it
// ends. The warning names neither the token nor the secret.
func TestCappedHealIsWarnedOnce(t *testing.T) {
	o := newObservability(t)
	f := newTokenFleet(t, 1, o.opts...)
	token := func() string { return f.token(t, 0) }
	call := func(tok string) {
		resp, err := f.clients[0].Get(f.emu.URL + "/cgi-bin/user/info?openid=o1&access_token=" + url.QueryEscape(tok))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	first := token()
	f.emu.Revoke(first)
	call(first) // healed
	second := token()
	if second == first {
		t.Fatal("the healed token was handed out again")
	}
	f.emu.Revoke(second)
	call(second) // capped: within 30 s of the first heal
	if again := token(); again != second {
		t.Fatal("a capped heal dropped the kept token")
	}
	call(second) // capped again, not warned again
	got := counts(t, o.metrics(t)["throttle.tokens.exchanges"], "result")
	if got["healed"] != 1 || got["capped"] != 2 {
		t.Fatalf("throttle.tokens.exchanges by result = %v, want healed 1, capped 2", got)
	}
	logs := o.logs.String()
	if n := strings.Count(logs, "heals of its credential are capped"); n != 1 {
		t.Fatalf("%d warnings of a capped heal, want 1:\n%s", n, logs)
	}
	for _, secret := range []string{first, second, fleetSecret} {
		if strings.Contains(logs, secret) {
			t.Fatalf("the logs hold a token or the secret:\n%s", logs)
		}
	}
}

// The app book of a replica whose exchange was answered from Redis learns
// the token as if it had seen the fetch: before the limiter, the answer
// still goes through the book, marked as sent to the preset's profile.
func TestSharedAnswerIsLearned(t *testing.T) {
	f := newTokenFleet(t, 2, throttle.WithApps(apps.Config{Key: []byte("0123456789abcdef0123456789abcdef")}))
	f.sdk(t, 0, fleetApps[0], 0) // fetched by replica 0
	f.sdk(t, 1, fleetApps[0], 0) // answered from Redis on replica 1
	if n := f.emu.Fetches(fleetApps[0], "/cgi-bin/token"); n != 1 {
		t.Fatalf("%d fetches, want 1", n)
	}
	st := f.clients[1].Transport.(*throttle.Transport).Apps().Stats()
	if st.Learned != 1 || st.Refused != 0 {
		t.Fatalf("replica 1's book: learned %d, refused %d; want 1 and 0", st.Learned, st.Refused)
	}
}

// Neither an app secret nor an access token is ever in clear in a Redis
// key or value, a Pub/Sub message, a log line, a span or a metric, through
// exchanges fetched, shared, healed and the calls made with their tokens,
// with apps learned and shared through Redis.
func TestNoCredentialAnywhere(t *testing.T) {
	o := newObservability(t)
	srv := redistest.Shared(t)
	sub := srv.Client(t).PSubscribe(context.Background(), "*")
	t.Cleanup(func() { sub.Close() })
	if _, err := sub.Receive(context.Background()); err != nil { // the subscription's confirmation
		t.Fatal(err)
	}
	// Redis delivers a subscription's messages in the order it ran the
	// PUBLISHes: once a sentinel published at the end arrives, every
	// announcement made before it has.
	sentinel := "sentinel-" + limitertest.Group(t)
	var published strings.Builder
	done := make(chan struct{})
	go func() {
		for m := range sub.Channel() {
			if m.Channel == sentinel {
				close(done)
				return
			}
			published.WriteString(m.Channel + " " + m.Payload + "\n")
		}
	}()
	f := newTokenFleet(t, 3, append(o.opts, throttle.WithApps(apps.Config{Key: []byte("0123456789abcdef0123456789abcdef")}))...)
	current := func() string { return f.token(t, 2) }
	f.restart(t, 2)
	revoked := current()
	f.emu.Revoke(revoked)
	f.restart(t, 1) // heals
	tokens := []string{revoked, current()}
	if tokens[0] == "" || tokens[0] == tokens[1] {
		t.Fatalf("tokens %q: want two, before and after the heal", tokens)
	}

	var seen strings.Builder
	rdb := srv.Client(t)
	keys, err := rdb.Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		v, _ := rdb.Dump(context.Background(), k).Result()
		seen.WriteString("redis " + k + " " + v + "\n")
	}
	for _, s := range o.spans.GetSpans() {
		fmt.Fprintf(&seen, "span %s %v %v %v\n", s.Name, s.Attributes, s.Events, s.Status)
	}
	fmt.Fprintf(&seen, "metrics %+v\n", o.metrics(t))
	seen.WriteString(o.logs.String())
	if err := rdb.Publish(context.Background(), sentinel, "end").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
		seen.WriteString(published.String())
	case <-time.After(10 * time.Second):
		t.Fatal("the sentinel message never arrived")
	}
	for _, secret := range append(tokens, fleetSecret) {
		if i := strings.Index(seen.String(), secret); i >= 0 {
			t.Fatalf("%q in clear: %s", secret, seen.String()[max(0, i-200):min(seen.Len(), i+100)])
		}
	}
	if len(keys) == 0 || len(o.spans.GetSpans()) == 0 || !strings.Contains(seen.String(), "throttle.tokens.exchanges") {
		t.Fatalf("nothing was written or exported, so the check proves nothing")
	}
}

// A request no profile matches is not a provider's: a token exchange of
// that shape on another host (an internal service's /cgi-bin/token) is
// neither kept in Redis nor answered from it.
func TestUnmatchedExchangeIsNotShared(t *testing.T) {
	srv := redistest.Shared(t)
	prefix := limitertest.Group(t)
	emu := fleetEmulator(t)
	set := wechat.MustNew(wechat.Config{Hosts: []string{"api.weixin.qq.com"}, Apps: []wechat.App{{AppID: fleetApps[0]}}})
	var clients []*http.Client
	for range 2 {
		tr := throttle.MustNew(throttle.WithLimiter(limiter.MustNewShared(srv.Client(t), limiter.SharedConfig{Prefix: prefix})),
			throttle.WithProfiles(set.Profile()))
		t.Cleanup(func() { tr.Close() })
		clients = append(clients, &http.Client{Transport: tr})
	}
	for _, c := range clients {
		resp, err := c.Get(fleetTokenURL(emu))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if n := emu.Fetches(fleetApps[0], "/cgi-bin/token"); n != 2 {
		t.Fatalf("%d fetches, want each replica's own (2): the unmatched exchange was shared", n)
	}
	if keys := srv.Client(t).Keys(context.Background(), prefix+":token:*").Val(); len(keys) != 0 {
		t.Fatalf("unmatched exchange kept in Redis: %v", keys)
	}
}

func (g *gatedBase) RoundTrip(req *http.Request) (*http.Response, error) {
	if strings.HasSuffix(req.URL.Path, "/cgi-bin/token") {
		g.once.Do(func() { close(g.entered) })
		<-g.release
	}
	return g.upstream.RoundTrip(req)
}
