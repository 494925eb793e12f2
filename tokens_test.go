package throttle_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	resp, err := f.clients[0].Get(f.emu.URL + "/cgi-bin/token?grant_type=client_credential&appid=" + fleetApps[0] + "&secret=" + fleetSecret)
	if err != nil {
		t.Fatal(err)
	}
	_ = json.NewDecoder(resp.Body).Decode(&tok)
	resp.Body.Close()
	f.emu.Revoke(tok.AccessToken)
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
	emu := wechattest.NewServer(wechattest.Options{Apps: map[string]string{fleetApps[0]: fleetSecret}})
	defer emu.Close()
	u, _ := url.Parse(emu.URL)
	quota := func() map[string]int { return map[string]int{"/cgi-bin/token": 2} }
	set := wechat.MustNew(wechat.Config{Hosts: []string{u.Hostname()},
		Unknown: wechat.App{Daily: quota(), PerMinute: map[string]int{}},
		Apps:    []wechat.App{{AppID: fleetApps[0], Daily: quota(), PerMinute: map[string]int{}}}})
	var clients []*http.Client
	for range 2 {
		tr := throttle.MustNew(throttle.WithLimiter(limiter.MustNewShared(srv.Client(t), limiter.SharedConfig{Prefix: prefix})),
			throttle.WithProfiles(set.Profile()), throttle.WithMaxWait(50*time.Millisecond))
		t.Cleanup(func() { tr.Close() })
		clients = append(clients, &http.Client{Transport: tr})
	}
	for i := range 20 {
		resp, err := clients[i%2].Get(emu.URL + "/cgi-bin/token?grant_type=client_credential&appid=" + fleetApps[0] + "&secret=" + fleetSecret)
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

// throttle.tokens.exchanges counts the fleet's exchanges by provider and
// result: a fetch, an answer from Redis, a token the provider refused
// (healed) and the fetch that replaced it. No attribute holds a token or
// a secret.
func TestTokenExchangesMetric(t *testing.T) {
	o := newObservability(t)
	f := newTokenFleet(t, 2, o.opts...)
	f.sdk(t, 0, fleetApps[0], 0) // fetched
	f.sdk(t, 1, fleetApps[0], 0) // shared
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	resp, err := f.clients[1].Get(f.emu.URL + "/cgi-bin/token?grant_type=client_credential&appid=" + fleetApps[0] + "&secret=" + fleetSecret)
	if err != nil {
		t.Fatal(err)
	}
	_ = json.NewDecoder(resp.Body).Decode(&tok) // shared
	resp.Body.Close()
	f.emu.Revoke(tok.AccessToken)
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
			if v := kv.Value.Emit(); strings.Contains(v, tok.AccessToken) || strings.Contains(v, fleetSecret) || strings.Contains(v, fleetApps[0]) {
				t.Fatalf("attribute %s=%q holds a credential", kv.Key, v)
			}
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
	current := func() string {
		var tok struct {
			AccessToken string `json:"access_token"`
		}
		resp, err := f.clients[2].Get(f.emu.URL + "/cgi-bin/token?grant_type=client_credential&appid=" + fleetApps[0] + "&secret=" + fleetSecret)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		_ = json.NewDecoder(resp.Body).Decode(&tok)
		return tok.AccessToken
	}
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
	emu := wechattest.NewServer(wechattest.Options{Apps: map[string]string{fleetApps[0]: fleetSecret}})
	t.Cleanup(emu.Close)
	set := wechat.MustNew(wechat.Config{Hosts: []string{"api.weixin.qq.com"}, Apps: []wechat.App{{AppID: fleetApps[0]}}})
	var clients []*http.Client
	for range 2 {
		tr := throttle.MustNew(throttle.WithLimiter(limiter.MustNewShared(srv.Client(t), limiter.SharedConfig{Prefix: prefix})),
			throttle.WithProfiles(set.Profile()))
		t.Cleanup(func() { tr.Close() })
		clients = append(clients, &http.Client{Transport: tr})
	}
	for _, c := range clients {
		resp, err := c.Get(emu.URL + "/cgi-bin/token?grant_type=client_credential&appid=" + fleetApps[0] + "&secret=" + fleetSecret)
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

// gatedBase holds every token request until release is closed, telling
// entered when the first arrives: another replica's fetch from a provider
// that is slow to answer.
type gatedBase struct {
	once     sync.Once
	entered  chan struct{}
	release  chan struct{}
	upstream http.RoundTripper
}

func (g *gatedBase) RoundTrip(req *http.Request) (*http.Response, error) {
	if strings.HasSuffix(req.URL.Path, "/cgi-bin/token") {
		g.once.Do(func() { close(g.entered) })
		<-g.release
	}
	return g.upstream.RoundTrip(req)
}

// A replica waits for another replica's fetch of the same credential no
// longer than its WithMaxWait, then fails as any wait that does not fit
// does, with ErrThrottled, sending nothing: it waited until its context
// ended, up to a minute behind a slow provider (and for ever without a
// deadline behind a lease without an end).
func TestTokenWaitFitsTheBudget(t *testing.T) {
	for _, maxWait := range []time.Duration{150 * time.Millisecond, 0} {
		t.Run(maxWait.String(), func(t *testing.T) { testTokenWaitFitsTheBudget(t, maxWait) })
	}
}

// WithMaxWait(0) is "never wait": an exchange behind another replica's
// fetch fails at once (the Sharer's own 0 had been taken for no bound).
func testTokenWaitFitsTheBudget(t *testing.T, maxWait time.Duration) {
	gate := &gatedBase{entered: make(chan struct{}), release: make(chan struct{}), upstream: http.DefaultTransport}
	o := newObservability(t)
	f := newTokenFleet(t, 2, append(o.opts, throttle.WithBase(gate), throttle.WithMaxWait(maxWait), throttle.WithoutRetry())...)
	tokenURL := f.emu.URL + "/cgi-bin/token?grant_type=client_credential&appid=" + fleetApps[0] + "&secret=" + fleetSecret

	fetched := make(chan error, 1)
	go func() {
		resp, err := f.clients[0].Get(tokenURL)
		if err == nil {
			resp.Body.Close()
		}
		fetched <- err
	}()
	<-gate.entered // replica 0 holds the lease, its fetch in flight

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, tokenURL, nil)
	start := time.Now()
	_, err := f.clients[1].Do(req)
	took := time.Since(start)
	var te *throttle.ThrottledError
	if !errors.Is(err, throttle.ErrThrottled) || !errors.As(err, &te) || te.Budget != maxWait || te.API != "/cgi-bin/token" {
		t.Fatalf("waiting behind a slow fetch: %#v, want a ThrottledError of /cgi-bin/token with the budget %v", err, maxWait)
	}
	if want := "rate limited by another replica's exchange of the credential, in flight: budget " + maxWait.String(); !strings.Contains(te.Error(), want) {
		t.Errorf("error %q, want it to say %q", te.Error(), want)
	}
	if took < maxWait || ctx.Err() != nil {
		t.Fatalf("failed after %v, want after the budget %v and well before the deadline", took, maxWait)
	}
	// The Transport's error names no secret; http.Client's *url.Error
	// around it quotes the URL, which RedactError blanks.
	if strings.Contains(te.Error(), fleetSecret) || strings.Contains(throttle.RedactError(err).Error(), fleetSecret) {
		t.Fatalf("the error names the secret: %v", te)
	}
	close(gate.release)
	if err := <-fetched; err != nil {
		t.Fatal(err)
	}
	if n := len(f.emu.Requests()); n != 1 {
		t.Fatalf("%d requests reached the provider, want the one fetch", n)
	}
	// The refusal shows as any refused request does, in throttle.requests
	// and in a span, naming the API and neither the secret nor the app.
	if got, want := counts(t, o.metrics(t)["throttle.requests"], "outcome"), map[string]int64{"admitted": 1, "throttled": 1}; !maps.Equal(got, want) {
		t.Errorf("throttle.requests by outcome = %v, want %v", got, want)
	}
	var refused int
	for _, sp := range o.spans.GetSpans() {
		attrs := map[string]string{}
		for _, kv := range sp.Attributes {
			attrs[string(kv.Key)] = kv.Value.Emit()
		}
		if attrs["throttle.outcome"] != "throttled" {
			continue
		}
		refused++
		if attrs["throttle.api"] != "/cgi-bin/token" {
			t.Errorf("span of the refused exchange names the API %q, want /cgi-bin/token", attrs["throttle.api"])
		}
		for _, text := range append(slices.Collect(maps.Values(attrs)), sp.Status.Description) {
			if strings.Contains(text, fleetSecret) || strings.Contains(text, fleetApps[0]) {
				t.Errorf("span of the refused exchange holds a credential: %q", text)
			}
		}
	}
	if refused != 1 {
		t.Errorf("%d spans of a refused exchange, want 1", refused)
	}
}

// An exchange the limiter admitted and that was then answered from Redis
// (another replica's fetch ended while it waited for its slot) reached no
// provider: it counts in throttle.tokens.exchanges alone, as one answered
// before the limiter does. It counted as waited in throttle.requests.
func TestExchangeAnsweredAfterTheLimiterIsNotARequest(t *testing.T) {
	srv := redistest.Shared(t)
	prefix := limitertest.Group(t)
	rdb := srv.Client(t)
	emu := wechattest.NewServer(wechattest.Options{Apps: map[string]string{fleetApps[0]: fleetSecret}})
	defer emu.Close()
	tokenURL := emu.URL + "/cgi-bin/token?grant_type=client_credential&appid=" + fleetApps[0] + "&secret=" + fleetSecret
	o := newObservability(t)
	paced := throttle.MustNew(append(o.opts, throttle.WithLimiter(limiter.MustNewShared(rdb, limiter.SharedConfig{Prefix: prefix})),
		throttle.WithProfiles(testProfile("wechat", mustRule(t, 1, 3*time.Second))), throttle.WithMaxWait(10*time.Second), throttle.WithoutRetry())...)
	defer paced.Close()
	free := throttle.MustNew(throttle.WithLimiter(limiter.MustNewShared(srv.Client(t), limiter.SharedConfig{Prefix: prefix})),
		throttle.WithProfiles(testProfile("wechat")), throttle.WithoutTelemetry())
	defer free.Close()

	// The paced replica's first call takes the rule's slot: its exchange
	// then waits 3 s for the next.
	resp, err := (&http.Client{Transport: paced}).Get(emu.URL + "/cgi-bin/user/info?openid=o")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	ruleState := groupState(rdb, prefix, "wechat")
	before := ruleState()
	exchanged := make(chan error, 1)
	go func() {
		resp, err := (&http.Client{Transport: paced}).Get(tokenURL)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		exchanged <- err
	}()
	// Once its slot is booked (the rule's state changed in Redis), it has
	// found nothing kept before the limiter: the other replica fetches now.
	for deadline := time.Now().Add(2 * time.Second); ruleState() == before; {
		if time.Now().After(deadline) {
			t.Fatal("the exchange booked no slot within 2 s")
		}
		time.Sleep(time.Millisecond) // polling Redis for the booking
	}
	resp, err = (&http.Client{Transport: free}).Get(tokenURL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := <-exchanged; err != nil {
		t.Fatal(err)
	}
	if n := emu.Fetches(fleetApps[0], "/cgi-bin/token"); n != 1 {
		t.Fatalf("%d fetches at WeChat, want the other replica's one", n)
	}
	m := o.metrics(t)
	if got := counts(t, m["throttle.requests"], "outcome"); len(got) != 1 || got["admitted"] != 1 {
		t.Errorf("throttle.requests by outcome = %v, want only the API call admitted", got)
	}
	if got := counts(t, m["throttle.tokens.exchanges"], "result"); got["shared"] != 1 {
		t.Errorf("throttle.tokens.exchanges by result = %v, want it shared", got)
	}
}

// A token exchange whose first attempt failed, and whose retry was then
// answered from Redis (another replica fetched meanwhile), is a retried
// call like any other: it shows in throttle.requests, throttle.retries and
// a span. It left no trace.
func TestRetriedExchangeAnsweredFromRedisIsRecorded(t *testing.T) {
	srv := redistest.Shared(t)
	prefix := limitertest.Group(t)
	emu := wechattest.NewServer(wechattest.Options{Apps: map[string]string{fleetApps[0]: fleetSecret}})
	defer emu.Close()
	u, _ := url.Parse(emu.URL)
	set := wechat.MustNew(wechat.Config{Hosts: []string{u.Hostname()}, Apps: []wechat.App{{AppID: fleetApps[0]}}})
	tokenURL := emu.URL + "/cgi-bin/token?grant_type=client_credential&appid=" + fleetApps[0] + "&secret=" + fleetSecret
	other := throttle.MustNew(throttle.WithLimiter(limiter.MustNewShared(srv.Client(t), limiter.SharedConfig{Prefix: prefix})),
		throttle.WithProfiles(set.Profile()), throttle.WithoutTelemetry())
	defer other.Close()

	var calls atomic.Int32
	fetched := make(chan error, 1)
	base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if calls.Add(1) > 1 {
			return http.DefaultTransport.RoundTrip(req)
		}
		// The first attempt fails. The other replica, waiting for this
		// one's lease, fetches once it is let go, well within the retry's
		// backoff of a second.
		go func() {
			resp, err := (&http.Client{Transport: other}).Get(tokenURL)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			fetched <- err
		}()
		return nil, errors.New("connection reset by peer")
	})
	o := newObservability(t)
	tr := throttle.MustNew(append(o.opts, throttle.WithLimiter(limiter.MustNewShared(srv.Client(t), limiter.SharedConfig{Prefix: prefix})),
		throttle.WithProfiles(set.Profile()), throttle.WithBase(base),
		throttle.WithRetry(throttle.RetryPolicy{MaxAttempts: 2, MinBackoff: time.Second, MaxBackoff: time.Second}))...)
	defer tr.Close()
	resp, err := (&http.Client{Transport: tr}).Get(tokenURL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := <-fetched; err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("the retry reached the provider (%d sends): the other replica's fetch came too late to test the case", n)
	}
	m := o.metrics(t)
	if got := counts(t, m["throttle.requests"], "outcome"); got["admitted"]+got["waited"] != 1 {
		t.Errorf("throttle.requests by outcome = %v, want the call once", got)
	}
	if got := counts(t, m["throttle.retries"], "provider"); got["wechat"] != 1 {
		t.Errorf("throttle.retries = %v, want 1", got)
	}
	if n := len(o.spans.GetSpans()); n != 1 {
		t.Errorf("%d spans, want the retried call's", n)
	}
}

// An exchange that waited for its limiter slot, then behind another
// replica's fetch, waits no longer in all than WithMaxWait from its start:
// the wait behind the fetch had a fresh WithMaxWait of its own (2 s for
// the slot, then 2.5 s more: 4.5 s with WithMaxWait(2.5s)).
func TestExchangeWaitsNoLongerThanItsBudgetInAll(t *testing.T) {
	const slotWait, maxWait = 2 * time.Second, 2500 * time.Millisecond
	srv := redistest.Shared(t)
	prefix := limitertest.Group(t)
	rdb := srv.Client(t)
	emu := wechattest.NewServer(wechattest.Options{Apps: map[string]string{fleetApps[0]: fleetSecret}})
	defer emu.Close()
	tokenURL := emu.URL + "/cgi-bin/token?grant_type=client_credential&appid=" + fleetApps[0] + "&secret=" + fleetSecret
	paced := throttle.MustNew(throttle.WithLimiter(limiter.MustNewShared(rdb, limiter.SharedConfig{Prefix: prefix})),
		throttle.WithProfiles(testProfile("wechat", mustRule(t, 1, slotWait))), throttle.WithMaxWait(maxWait),
		throttle.WithoutRetry(), throttle.WithoutTelemetry())
	defer paced.Close()
	gate := &gatedBase{entered: make(chan struct{}), release: make(chan struct{}), upstream: http.DefaultTransport}
	slow := throttle.MustNew(throttle.WithLimiter(limiter.MustNewShared(srv.Client(t), limiter.SharedConfig{Prefix: prefix})),
		throttle.WithProfiles(testProfile("wechat")), throttle.WithBase(gate), throttle.WithoutTelemetry())
	defer slow.Close()

	resp, err := (&http.Client{Transport: paced}).Get(emu.URL + "/cgi-bin/user/info?openid=o") // takes the slot
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	ruleState := groupState(rdb, prefix, "wechat")
	before := ruleState()
	type result struct {
		err  error
		took time.Duration
	}
	done := make(chan result, 1)
	go func() {
		start := time.Now()
		resp, err := (&http.Client{Transport: paced}).Get(tokenURL)
		if err == nil {
			resp.Body.Close()
		}
		done <- result{err, time.Since(start)}
	}()
	for deadline := time.Now().Add(slotWait / 2); ruleState() == before; {
		if time.Now().After(deadline) {
			t.Fatal("the exchange booked no slot in time")
		}
		time.Sleep(time.Millisecond) // polling Redis for the booking
	}
	// While it waits for its slot, the other replica takes the lease and
	// its fetch hangs.
	fetched := make(chan error, 1)
	go func() {
		resp, err := (&http.Client{Transport: slow}).Get(tokenURL)
		if err == nil {
			resp.Body.Close()
		}
		fetched <- err
	}()
	<-gate.entered
	r := <-done
	close(gate.release)
	if err := <-fetched; err != nil {
		t.Fatal(err)
	}
	if !errors.Is(r.err, throttle.ErrThrottled) {
		t.Fatalf("exchange behind a hung fetch: %v, want ErrThrottled", r.err)
	}
	// WithMaxWait from its start, not the slot's wait and then WithMaxWait
	// again (1 s either side of the midpoint).
	if r.took >= slotWait+maxWait-time.Second {
		t.Fatalf("the exchange took %v, want about its budget %v, well under %v", r.took, maxWait, slotWait+maxWait)
	}
}

// groupState returns what reads the string keys of a limiter group in
// Redis, to tell when a request booked a slot.
func groupState(rdb *redis.Client, prefix, group string) func() string {
	return func() string {
		keys, _ := rdb.Keys(context.Background(), "{"+prefix+":"+group+"}:*").Result()
		slices.Sort(keys)
		var b strings.Builder
		for _, k := range keys {
			v, _ := rdb.Get(context.Background(), k).Result()
			b.WriteString(k + "=" + v + ";")
		}
		return b.String()
	}
}
