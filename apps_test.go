package throttle_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/apps"
	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/limitertest"
	"github.com/quotaware/throttle/providers"
	"github.com/quotaware/throttle/providers/dingtalk"
	"github.com/quotaware/throttle/providers/dingtalk/dingtalktest"
	"github.com/quotaware/throttle/providers/feishu"
	"github.com/quotaware/throttle/providers/wechat"
)

// Tokens and secrets reach no Redis key or value (nor a Pub/Sub message),
// no metric, no span and no log line: two replicas learn apps and an ISV
// suite's orgs from exchanges of both API generations, call with known and
// unknown tokens, and take a quota error that is shared as a penalty.
func TestCredentialsStayOutOfRedisAndTelemetry(t *testing.T) {
	srv := redistest.Shared(t)
	prefix := limitertest.Group(t)
	ctx := context.Background()

	// Everything published on the Transports' channels while the test runs.
	sub := srv.Client(t).PSubscribe(ctx, "*")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	var (
		msgMu sync.Mutex
		msgs  []string
	)
	go func() {
		for m := range sub.Channel() {
			msgMu.Lock()
			msgs = append(msgs, m.Channel+" "+m.Payload)
			msgMu.Unlock()
		}
	}()

	const (
		appSecret   = "APPSECRET-9c1d7e"
		suiteSecret = "SUITESECRET-4b2a"
		suiteTicket = "SUITETICKET-77e1"
		unknownTok  = "UNKNOWNTOKEN-5d0c"
	)
	emu := dingtalktest.New(dingtalktest.Options{
		Apps:   map[string]string{"dingA": appSecret},
		Suites: map[string]string{"suiteS": suiteSecret},
	})
	defer emu.Close()
	set := dingtalk.MustNew(dingtalk.Config{Hosts: []string{emu.Host()}, Apps: []dingtalk.App{{AppKey: "dingA"}, {AppKey: "suiteS", ISV: true}}})
	o := newObservability(t)
	bookMetrics := sdkmetric.NewManualReader()
	bookMeter := sdkmetric.NewMeterProvider(sdkmetric.WithReader(bookMetrics))
	defer bookMeter.Shutdown(ctx)
	var clients []*http.Client
	for range 2 {
		rdb := srv.Client(t)
		tr := throttle.MustNew(append(o.opts, sharedOpt(t, rdb, limiter.SharedConfig{Prefix: prefix}),
			throttle.WithProfiles(set.Profile()),
			throttle.WithApps(apps.Config{Key: []byte("shared-key-0123456789"), MeterProvider: bookMeter}))...)
		t.Cleanup(func() { tr.Close() })
		clients = append(clients, &http.Client{Transport: tr})
	}

	send := func(c *http.Client, method, path, body string, h map[string]string) string {
		t.Helper()
		req, _ := http.NewRequest(method, emu.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := c.Do(req)
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	tokenOf := func(answer string) string {
		var a struct{ Old, New string }
		var m map[string]any
		_ = json.Unmarshal([]byte(answer), &m)
		a.Old, _ = m["access_token"].(string)
		a.New, _ = m["accessToken"].(string)
		if a.Old+a.New == "" {
			t.Fatalf("no token in %s", answer)
		}
		return a.Old + a.New
	}
	tokens := []string{
		tokenOf(send(clients[0], "GET", "/gettoken?appkey=dingA&appsecret="+appSecret, "", nil)),
		tokenOf(send(clients[0], "POST", "/v1.0/oauth2/accessToken", `{"appKey":"dingA","appSecret":"`+appSecret+`"}`, nil)),
		tokenOf(send(clients[0], "POST", "/v1.0/oauth2/corpAccessToken",
			`{"suiteKey":"suiteS","suiteSecret":"`+suiteSecret+`","authCorpId":"corp1","suiteTicket":"`+suiteTicket+`"}`, nil)),
		tokenOf(send(clients[0], "POST", "/service/get_corp_token?accessKey=suiteS&timestamp=1&suiteTicket="+suiteTicket+"&signature=sig",
			`{"auth_corpid":"corp2"}`, nil)),
	}
	// The second replica's exchanges are answered from what the first
	// fetched, kept in Redis encrypted (package tokens): scanned below.
	if tok := tokenOf(send(clients[1], "GET", "/gettoken?appkey=dingA&appsecret="+appSecret, "", nil)); tok != tokens[0] {
		t.Errorf("the second replica's gettoken was not shared: %q, want %q", tok, tokens[0])
	}
	if tok := tokenOf(send(clients[1], "POST", "/v1.0/oauth2/corpAccessToken",
		`{"suiteKey":"suiteS","suiteSecret":"`+suiteSecret+`","authCorpId":"corp1","suiteTicket":"`+suiteTicket+`"}`, nil)); tok != tokens[2] {
		t.Errorf("the second replica's corpAccessToken was not shared: %q, want %q", tok, tokens[2])
	}
	// Both replicas call with every token, the second one learning them
	// from Redis; then a quota error in corp1, and an unknown token.
	for _, c := range clients {
		send(c, "GET", "/user/get?access_token="+tokens[0], "", nil)
		send(c, "GET", "/v1.0/contact/users/u1", "", map[string]string{"x-acs-dingtalk-access-token": tokens[1]})
		send(c, "GET", "/v1.0/contact/users/u1", "", map[string]string{"x-acs-dingtalk-access-token": tokens[2]})
		send(c, "GET", "/topapi/v2/user/get?access_token="+tokens[3], "", nil)
	}
	emu.FailNextIn("corp1", 1, http.StatusForbidden,
		`{"code":"Forbidden.AccessDenied.QpsLimitForSuitekeyAndOrgAndApi","message":"over the limit","requestid":"0123456789abcdef"}`)
	send(clients[1], "GET", "/v1.0/contact/users/u1", "", map[string]string{"x-acs-dingtalk-access-token": tokens[2]})
	send(clients[1], "GET", "/v1.0/contact/users/u1", "", map[string]string{"x-acs-dingtalk-access-token": tokens[2]})
	send(clients[1], "GET", "/user/get?access_token="+unknownTok, "", nil)
	for _, r := range emu.Requests() {
		if r.Org == "corp1" && r.Code != "" {
			goto penalised
		}
	}
	t.Fatal("the quota error was not answered")
penalised:

	// Wait until the penalty's announcement arrived, then read everything.
	deadline := time.Now().Add(5 * time.Second)
	for {
		msgMu.Lock()
		n := len(msgs)
		msgMu.Unlock()
		if n > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	var places []string // every string that left the process
	rdb := srv.Client(t)
	keys, err := rdb.Keys(ctx, prefix+"*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("keys: %v, %v", keys, err)
	}
	learned, shared := 0, 0
	for _, k := range keys {
		places = append(places, "key "+k)
		if strings.Contains(k, ":app:") {
			learned++
		}
		if strings.Contains(k, ":token:") {
			shared++
		}
		places = append(places, redisValue(t, rdb, k))
	}
	if shared != 3 {
		t.Errorf("%d shared exchanges in Redis, want 3 (gettoken, accessToken, corpAccessToken)", shared)
	}
	if learned != len(tokens) {
		t.Errorf("%d learned tokens in Redis, want %d", learned, len(tokens))
	}
	msgMu.Lock()
	if len(msgs) == 0 {
		t.Error("no penalty announcement was published: the quota error was not shared")
	}
	places = append(places, msgs...)
	msgMu.Unlock()
	places = append(places, o.logs.String())
	var rm metricdata.ResourceMetrics
	if err := o.reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	places = append(places, fmt.Sprintf("%+v", rm))
	var bm metricdata.ResourceMetrics
	if err := bookMetrics.Collect(ctx, &bm); err != nil {
		t.Fatal(err)
	}
	places = append(places, fmt.Sprintf("%+v", bm))
	for _, s := range o.spans.GetSpans() {
		places = append(places, fmt.Sprintf("%s %+v %+v %+v", s.Name, s.Attributes, s.Events, s.Status))
	}
	if !strings.Contains(fmt.Sprintf("%+v", bm), "throttle.apps.unknown") {
		t.Error("the unknown token was not counted in throttle.apps.unknown")
	}
	secrets := append([]string{appSecret, suiteSecret, suiteTicket, unknownTok}, tokens...)
	for _, p := range places {
		for _, s := range secrets {
			if strings.Contains(p, s) {
				t.Errorf("a credential left the process: %q in %.200q", s, p)
			}
		}
	}
}

// redisValue renders a key's value whatever its type.
func redisValue(t *testing.T, rdb *redis.Client, key string) string {
	ctx := context.Background()
	typ, err := rdb.Type(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	var v any
	switch typ {
	case "string":
		v, err = rdb.Get(ctx, key).Result()
	case "hash":
		v, err = rdb.HGetAll(ctx, key).Result()
	case "zset":
		v, err = rdb.ZRangeWithScores(ctx, key, 0, -1).Result()
	case "set":
		v, err = rdb.SMembers(ctx, key).Result()
	case "list":
		v, err = rdb.LRange(ctx, key, 0, -1).Result()
	default:
		t.Fatalf("key %s has type %s", key, typ)
	}
	if err != nil && err != redis.Nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%s %v", key, v)
}

// A context hint wins over learning: the same token, made as another app.
func TestWithAppOverridesLearning(t *testing.T) {
	emu := dingtalktest.New(dingtalktest.Options{Tokens: map[string]string{"tok": "dingA"}})
	defer emu.Close()
	set := dingtalk.MustNew(dingtalk.Config{Hosts: []string{emu.Host()}, Apps: []dingtalk.App{{AppKey: "dingA"}, {AppKey: "dingB"}}})
	var routed []string
	p := set.Profile()
	route := p.Route
	p.Route = func(req *http.Request) (providers.Route, error) {
		r, err := route(req)
		if err == nil {
			routed = append(routed, r.Scopes[0])
		}
		return r, err
	}
	tr := throttle.MustNew(throttle.WithProfiles(p), throttle.WithApps(apps.Config{}), throttle.WithoutTelemetry())
	_ = tr.Apps().Learn(context.Background(), "tok", apps.App{Provider: "dingtalk", ID: "dingA"}, time.Hour)
	client := &http.Client{Transport: tr}
	for _, ctx := range []context.Context{context.Background(), throttle.ContextWithApp(context.Background(), "dingB")} {
		req, _ := http.NewRequestWithContext(ctx, "GET", emu.URL+"/user/get?access_token=tok", nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if len(routed) != 2 || !strings.Contains(routed[0], "dingA") || !strings.Contains(routed[1], "dingB") {
		t.Fatalf("routed to %q, want dingA (learned) then dingB (the caller's)", routed)
	}
}

// ContextWithApp and ContextWithTenant tag a request with the app, and the
// customer org or tenant, that the presets charge it to.
func TestContextWithAppAndTenant(t *testing.T) {
	for _, c := range []struct {
		ctx  context.Context
		want apps.App
	}{
		{throttle.ContextWithApp(context.Background(), "dingA"), apps.App{ID: "dingA"}},
		{throttle.ContextWithTenant(context.Background(), "suiteS", "dingcorp1"), apps.App{ID: "suiteS", Org: "dingcorp1"}},
	} {
		if got, ok := apps.FromContext(c.ctx); !ok || got != c.want {
			t.Errorf("FromContext = %+v, %v; want %+v", got, ok, c.want)
		}
	}
}

// A context tagged with one provider's app (ContextWithApp names no
// provider) reused for another provider's call: the preset that does not
// know the named app charges the call to the app its token is known to
// belong to, not to an app made up under the tag's name beside it. A tag
// naming an app the preset does not know, with a token it does not know
// either, still gets the app's own budget (WeCom companies named by the
// caller, unlisted).
func TestCallerTagOfAnotherProvidersApp(t *testing.T) {
	const api = "https://open.feishu.cn/open-apis/contact/v3/users/ou_1"
	p := feishu.MustNew(feishu.Config{Apps: []feishu.App{{AppID: "cli_1"}, {AppID: "cli_2"}}}).Profile()
	routedPtr := routedBy(&p)
	tr := throttle.MustNew(throttle.WithProfiles(p), throttle.WithApps(apps.Config{}), throttle.WithoutTelemetry(),
		throttle.WithBase(&answerAll{}), throttle.WithoutRetry())
	t.Cleanup(func() { tr.Close() })
	if err := tr.Apps().Learn(context.Background(), "t-cli1", apps.App{Provider: "feishu", ID: "cli_1"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: tr}
	for _, tc := range []struct{ tag, token string }{
		{"dingabc", "t-cli1"},  // another provider's app, a token known as cli_1's
		{"cli_2", "t-cli1"},    // a listed app: the caller's word wins
		{"cli_new", "t-other"}, // unknown app, unknown token: the app's own budget
	} {
		req, _ := http.NewRequestWithContext(throttle.ContextWithApp(context.Background(), tc.tag), http.MethodGet, api, nil)
		req.Header.Set("Authorization", "Bearer "+tc.token)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	routed := *routedPtr
	if len(routed) != 3 || !strings.Contains(routed[0], "cli_1") || !strings.Contains(routed[1], "cli_2") || !strings.Contains(routed[2], "cli_new") {
		t.Fatalf("routed by %q, want cli_1's rule (the token's), cli_2's (listed), cli_new's (named, unknown)", routed)
	}
}

// The token's app wins over a tag of an app the preset does not list in
// every preset: one that builds no unlisted app (Unlisted) too, and after a
// profile was built for the tag while the token was not known yet.
func TestCallerTagYieldsToTheKnownToken(t *testing.T) {
	send := func(t *testing.T, tr *throttle.Transport, u, bearer string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(throttle.ContextWithApp(context.Background(), "dingabc"), http.MethodGet, u, nil)
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	newTransport := func(t *testing.T, p providers.Profile) *throttle.Transport {
		tr := throttle.MustNew(throttle.WithProfiles(p), throttle.WithApps(apps.Config{}), throttle.WithoutTelemetry(),
			throttle.WithBase(&answerAll{}), throttle.WithoutRetry())
		t.Cleanup(func() { tr.Close() })
		return tr
	}
	t.Run("Unlisted", func(t *testing.T) {
		p := wechat.MustNew(wechat.Config{Apps: []wechat.App{{AppID: "wx1"}, {AppID: "wx2"}}, Default: "wx1", Unlisted: true}).Profile()
		routed := routedBy(&p)
		tr := newTransport(t, p)
		if err := tr.Apps().Learn(context.Background(), "t-wx2", apps.App{Provider: "wechat", ID: "wx2"}, time.Hour); err != nil {
			t.Fatal(err)
		}
		send(t, tr, "https://api.weixin.qq.com/cgi-bin/user/info?access_token=t-wx2", "")
		if len(*routed) != 1 || !strings.Contains((*routed)[0], "wx2") {
			t.Fatalf("routed by %q, want wx2's rule", *routed)
		}
	})
	t.Run("built before the token was known", func(t *testing.T) {
		p := feishu.MustNew(feishu.Config{Apps: []feishu.App{{AppID: "cli_1"}, {AppID: "cli_2"}}}).Profile()
		routed := routedBy(&p)
		tr := newTransport(t, p)
		const u = "https://open.feishu.cn/open-apis/contact/v3/users/ou_1"
		send(t, tr, u, "t-cli1") // the token not known yet: the named app's own profile
		if err := tr.Apps().Learn(context.Background(), "t-cli1", apps.App{Provider: "feishu", ID: "cli_1"}, time.Hour); err != nil {
			t.Fatal(err)
		}
		send(t, tr, u, "t-cli1")
		if len(*routed) != 2 || !strings.Contains((*routed)[0], "dingabc") || !strings.Contains((*routed)[1], "cli_1") {
			t.Fatalf("routed by %q, want dingabc's then, the token known, cli_1's", *routed)
		}
	})
}

// routedBy records the key of the first rule of every route p makes.
func routedBy(p *providers.Profile) *[]string {
	var routed []string
	route := p.Route
	p.Route = func(req *http.Request) (providers.Route, error) {
		r, err := route(req)
		if err == nil {
			routed = append(routed, r.Rules[0].Key())
		}
		return r, err
	}
	return &routed
}
