package apps_test

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

	"github.com/quotaware/throttle/apps"
	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/internal/tokenform"
	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) { redistest.Main(m) }

var testKey = []byte("0123456789abcdef-shared-hmac-key")

// loopback lets a Book observed outside a Transport learn from exchanges
// with the test servers, which run on loopback, not the providers' hosts.
func withLoopback(c apps.Config) apps.Config {
	c.Hosts = map[string][]string{"dingtalk": {"127.0.0.1"}, "wechat": {"127.0.0.1"}, "wecom": {"127.0.0.1"}, "feishu": {"127.0.0.1"}}
	return c
}

// exchangeServer answers every token call with the body the case gives.
func exchangeServer(t *testing.T, answer string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, answer)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestObserveLearnsEveryExchange(t *testing.T) {
	cases := []struct {
		name, method, path, body, answer string
		token                            string // the token the answer issued
		want                             apps.App
	}{
		{"dingtalk old", "GET", "/gettoken?appkey=dingA&appsecret=s3cret", "",
			`{"errcode":0,"errmsg":"ok","access_token":"TOKEN_0001","expires_in":7200}`, "TOKEN_0001", apps.App{Provider: "dingtalk", ID: "dingA"}},
		{"dingtalk old corpid", "GET", "/gettoken?corpid=dingCorp&corpsecret=s3cret", "",
			`{"errcode":0,"access_token":"TOKEN_0002","expires_in":7200}`, "TOKEN_0002", apps.App{Provider: "dingtalk", ID: "dingCorp"}},
		{"dingtalk new", "POST", "/v1.0/oauth2/accessToken", `{"appKey":"dingB","appSecret":"s3cret"}`,
			`{"accessToken":"TOKEN_0003","expireIn":7200}`, "TOKEN_0003", apps.App{Provider: "dingtalk", ID: "dingB"}},
		{"dingtalk client credentials", "POST", "/v1.0/oauth2/corp9/token", `{"client_id":"dingC","client_secret":"s3cret","grant_type":"client_credentials"}`,
			`{"access_token":"TOKEN_0004","expires_in":7200}`, "TOKEN_0004", apps.App{Provider: "dingtalk", ID: "dingC", Org: "corp9"}},
		{"dingtalk isv", "POST", "/v1.0/oauth2/corpAccessToken", `{"suiteKey":"suiteS","suiteSecret":"s3cret","authCorpId":"orgX","suiteTicket":"t"}`,
			`{"accessToken":"TOKEN_0005","expireIn":7200}`, "TOKEN_0005", apps.App{Provider: "dingtalk", ID: "suiteS", Org: "orgX"}},
		{"dingtalk isv old", "POST", "/service/get_corp_token?accessKey=suiteS&timestamp=1&suiteTicket=t&signature=x", `{"auth_corpid":"orgY"}`,
			`{"errcode":0,"access_token":"TOKEN_0006","expires_in":7200}`, "TOKEN_0006", apps.App{Provider: "dingtalk", ID: "suiteS", Org: "orgY"}},
		{"wechat", "GET", "/cgi-bin/token?grant_type=client_credential&appid=wxA&secret=s3cret", "",
			`{"access_token":"TOKEN_0007","expires_in":7200}`, "TOKEN_0007", apps.App{Provider: "wechat", ID: "wxA"}},
		{"wechat stable", "POST", "/cgi-bin/stable_token", `{"grant_type":"client_credential","appid":"wxB","secret":"s3cret","force_refresh":false}`,
			`{"access_token":"TOKEN_0008","expires_in":7200}`, "TOKEN_0008", apps.App{Provider: "wechat", ID: "wxB"}},
		{"wecom", "GET", "/cgi-bin/gettoken?corpid=wwA&corpsecret=s3cret", "",
			`{"errcode":0,"errmsg":"ok","access_token":"TOKEN_0009","expires_in":7200}`, "TOKEN_0009", apps.App{Provider: "wecom", ID: "wwA"}},
		{"wecom third party", "POST", "/cgi-bin/service/get_corp_token?suite_access_token=UNSEEN", `{"auth_corpid":"wwB","permanent_code":"s3cret"}`,
			`{"access_token":"TOKEN_00010","expires_in":7200}`, "TOKEN_00010", apps.App{Provider: "wecom", ID: "suite", Org: "wwB"}},
		{"feishu tenant", "POST", "/open-apis/auth/v3/tenant_access_token/internal", `{"app_id":"cli_a","app_secret":"s3cret"}`,
			`{"code":0,"msg":"ok","tenant_access_token":"t-TOKEN_00011","expire":7200}`, "t-TOKEN_00011", apps.App{Provider: "feishu", ID: "cli_a"}},
		{"feishu app", "POST", "/open-apis/auth/v3/app_access_token/internal", `{"app_id":"cli_b","app_secret":"s3cret"}`,
			`{"code":0,"msg":"ok","app_access_token":"a-TOKEN_00012","tenant_access_token":"t-TOKEN_00012","expire":7200}`, "t-TOKEN_00012", apps.App{Provider: "feishu", ID: "cli_b"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			book := apps.MustNew(withLoopback(apps.Config{}))
			srv := exchangeServer(t, tc.answer)
			client := &http.Client{Transport: book.Observe(http.DefaultTransport)}
			var body io.Reader
			if tc.body != "" {
				body = strings.NewReader(tc.body)
			}
			req, _ := http.NewRequest(tc.method, srv.URL+tc.path, body)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(got) != tc.answer {
				t.Fatalf("caller read %q, want the answer byte for byte %q", got, tc.answer)
			}
			app, ok := book.Lookup(context.Background(), tc.token)
			want := tc.want
			want.Learned = true
			if !ok || app != want {
				t.Fatalf("Lookup = %+v, %v; want %+v", app, ok, want)
			}
		})
	}
}

// A token exchange written as an Opaque URL (Path empty, the path sent
// being Opaque's: a WeChat GET /cgi-bin/token, a DingTalk exchange whose
// path names the org) is the exchange all the same: Resolve charges it to
// the app it names, and Observe learns whose token it hands out. Read by
// its Path, it was neither.
func TestOpaqueURLExchangeIsLearned(t *testing.T) {
	cases := []struct {
		name, provider, method, path, query, body, token string
		want                                             apps.App
	}{
		{"wechat", "wechat", "GET", "/cgi-bin/token", "grant_type=client_credential&appid=wxO&secret=s3cret", "",
			"TOKEN_OPAQUE1", apps.App{Provider: "wechat", ID: "wxO"}},
		{"dingtalk client credentials", "dingtalk", "POST", "/v1.0/oauth2/corpO/token", "",
			`{"client_id":"dingO","client_secret":"s3cret","grant_type":"client_credentials"}`,
			"TOKEN_OPAQUE2", apps.App{Provider: "dingtalk", ID: "dingO", Org: "corpO"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			book := apps.MustNew(withLoopback(apps.Config{}))
			srv := exchangeServer(t, `{"access_token":"`+tc.token+`","expires_in":7200}`)
			u, err := url.Parse(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			newReq := func() *http.Request {
				var body io.Reader
				if tc.body != "" {
					body = strings.NewReader(tc.body)
				}
				req, _ := http.NewRequest(tc.method, srv.URL, body)
				req.URL = &url.URL{Scheme: u.Scheme, Host: u.Host, Opaque: "//" + u.Host + tc.path, RawQuery: tc.query}
				return req
			}
			if app, ok := apps.FromContext(book.Resolve(newReq(), tc.provider).Context()); !ok || app != tc.want {
				t.Errorf("Resolve tagged %+v, %v; want %+v", app, ok, tc.want)
			}
			client := &http.Client{Transport: book.Observe(http.DefaultTransport)}
			resp, err := client.Do(newReq())
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			want := tc.want
			want.Learned = true
			if app, ok := book.Lookup(context.Background(), tc.token); !ok || app != want {
				t.Fatalf("Lookup = %+v, %v; want %+v", app, ok, want)
			}
		})
	}
}

func TestObserveSendsTheBodyUnchanged(t *testing.T) {
	var got atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got.Store(string(b))
		_, _ = io.WriteString(w, `{"accessToken":"T","expireIn":7200}`)
	}))
	defer srv.Close()
	book := apps.MustNew(apps.Config{})
	client := &http.Client{Transport: book.Observe(http.DefaultTransport)}
	for _, size := range []int{10, 20 << 10} { // a token call, and a big body that is none
		sent := `{"appKey":"k","pad":"` + strings.Repeat("x", size) + `"}`
		resp, err := client.Post(srv.URL+"/v1.0/oauth2/accessToken", "application/json", strings.NewReader(sent))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got.Load().(string) != sent {
			t.Fatalf("%d-byte body: the provider got %d bytes, want it unchanged", len(sent), len(got.Load().(string)))
		}
	}
}

func TestObserveIgnoresErrorAnswers(t *testing.T) {
	book := apps.MustNew(withLoopback(apps.Config{}))
	srv := exchangeServer(t, `{"errcode":40089,"errmsg":"不合法的appkey或appsecret","access_token":"BADTOKEN-1"}`)
	client := &http.Client{Transport: book.Observe(http.DefaultTransport)}
	resp, err := client.Get(srv.URL + "/gettoken?appkey=k&appsecret=wrong")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if _, ok := book.Lookup(context.Background(), "BADTOKEN-1"); ok {
		t.Fatal("learned a token from an error answer")
	}
}

func TestFeishuStoreAppTenantToken(t *testing.T) {
	book := apps.MustNew(withLoopback(apps.Config{}))
	ctx := context.Background()
	if err := book.Learn(ctx, "a-APP-token", apps.App{Provider: "feishu", ID: "cli_store"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	srv := exchangeServer(t, `{"code":0,"tenant_access_token":"t-TENANT-token","expire":7200}`)
	client := &http.Client{Transport: book.Observe(http.DefaultTransport)}
	resp, err := client.Post(srv.URL+"/open-apis/auth/v3/tenant_access_token", "application/json",
		strings.NewReader(`{"app_access_token":"a-APP-token","tenant_key":"tenant7"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	app, ok := book.Lookup(ctx, "t-TENANT-token")
	if !ok || app.ID != "cli_store" || app.Org != "tenant7" {
		t.Fatalf("Lookup = %+v, %v; want app cli_store, tenant tenant7", app, ok)
	}
}

func TestTokenPlaces(t *testing.T) {
	cases := []struct {
		name, url, header, value, want string
	}{
		{"query", "https://oapi.dingtalk.com/user/get?userid=1&access_token=abc", "", "", "abc"},
		{"query escaped", "https://api.weixin.qq.com/cgi-bin/x?access_token=a%2Bb", "", "", "a+b"},
		{"dingtalk header", "https://api.dingtalk.com/v1.0/x", "x-acs-dingtalk-access-token", "hdr", "hdr"},
		{"bearer", "https://open.feishu.cn/open-apis/x", "Authorization", "Bearer t-xyz", "t-xyz"},
		{"bearer any case", "https://open.feishu.cn/open-apis/x", "Authorization", "bearer t-xyz", "t-xyz"},
		{"other auth", "https://open.feishu.cn/open-apis/x", "Authorization", "Basic abc", ""},
		{"suite token is not an access token", "https://qyapi.weixin.qq.com/cgi-bin/service/get_corp_token?suite_access_token=s", "", "", ""},
		{"none", "https://oapi.dingtalk.com/user/get", "", "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", tc.url, nil)
			if tc.header != "" {
				req.Header.Set(tc.header, tc.value)
			}
			if got := tokenform.FromRequest(req); got != tc.want {
				t.Fatalf("Token = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestResolve(t *testing.T) {
	book := apps.MustNew(apps.Config{})
	ctx := context.Background()
	_ = book.Learn(ctx, "known", apps.App{Provider: "dingtalk", ID: "dingA"}, time.Hour)
	get := func(ctx context.Context, tok string) *http.Request {
		req, _ := http.NewRequestWithContext(ctx, "GET", "https://oapi.dingtalk.com/user/get?access_token="+tok, nil)
		return book.Resolve(req, "dingtalk")
	}
	if app, ok := apps.FromContext(get(ctx, "known").Context()); !ok || app.ID != "dingA" || !app.Learned {
		t.Errorf("known token: %+v, %v; want dingA, learned", app, ok)
	}
	if _, ok := apps.FromContext(get(ctx, "unknown").Context()); ok {
		t.Error("unknown token was tagged")
	}
	if n := book.Stats().Unknown; n != 1 {
		t.Errorf("Stats.Unknown = %d, want 1", n)
	}
	robot, _ := http.NewRequestWithContext(ctx, "POST", "https://oapi.dingtalk.com/robot/send?access_token=hook", nil)
	book.Resolve(robot, "dingtalk")
	if n := book.Stats().Unknown; n != 1 {
		t.Errorf("a robot webhook counted as unknown: Stats.Unknown = %d, want 1", n)
	}
	explicit := apps.NewContext(ctx, apps.App{ID: "dingB"})
	if app, _ := apps.FromContext(get(explicit, "known").Context()); app.ID != "dingB" || app.Learned {
		t.Errorf("the caller's app: got %+v, want dingB given by the caller", app)
	}
}

func TestEntriesExpireWithTheToken(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	book := apps.MustNew(apps.WithTestClock(apps.Config{}, clock))
	ctx := context.Background()
	_ = book.Learn(ctx, "tok", apps.App{Provider: "wechat", ID: "wxA"}, 10*time.Second)
	now = now.Add(9 * time.Second)
	if _, ok := book.Lookup(ctx, "tok"); !ok {
		t.Fatal("forgot the token before it expired")
	}
	now = now.Add(2 * time.Second)
	if _, ok := book.Lookup(ctx, "tok"); ok {
		t.Fatal("still knows the token after it expired")
	}
}

func TestMaxTokensBoundsTheCache(t *testing.T) {
	book := apps.MustNew(apps.Config{MaxTokens: 160})
	ctx := context.Background()
	for i := range 5000 {
		_ = book.Learn(ctx, "tok"+string(rune('a'+i%26))+time.Duration(i).String(), apps.App{Provider: "wechat", ID: "wxA"}, time.Hour)
	}
	if n := book.Stats().Tokens; n > 160 {
		t.Fatalf("the cache holds %d tokens, want at most 160", n)
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	cases := []struct {
		cfg  apps.Config
		want string
	}{
		{apps.Config{Redis: rdb}, "Config.Key"},
		{apps.Config{Redis: rdb, Key: []byte("short")}, "Config.Key"},
		{apps.Config{NegativeTTL: -1}, "Config.NegativeTTL"},
		{apps.Config{RedisTimeout: -1}, "Config.RedisTimeout"},
		{apps.Config{MaxTokens: -1}, "Config.MaxTokens"},
		{apps.Config{Hosts: map[string][]string{"dingtalk": nil}}, "Config.Hosts"},
		{apps.Config{Hosts: map[string][]string{"slack": {"a"}}}, "Config.Hosts"},
		{apps.Config{Hosts: map[string][]string{"wechat": {"http://a"}}}, "Config.Hosts"},
		// Each of these matched no request: the gateway's exchanges went
		// unlearned, their tokens charged to the unknown scope.
		{apps.Config{Hosts: map[string][]string{"wecom": {"gw.internal\t"}}}, `Config.Hosts["wecom"][0]`},
		{apps.Config{Hosts: map[string][]string{"wecom": {"gw:08443"}}}, `Config.Hosts["wecom"][0]`},
		{apps.Config{Hosts: map[string][]string{"wecom": {"gw:99999"}}}, `Config.Hosts["wecom"][0]`},
		{apps.Config{Hosts: map[string][]string{"wecom": {"gw", "api.weixin.qq.com"}}}, `Config.Hosts["wecom"][1]`},
		// A typed nil: a panic in New before.
		{apps.Config{Redis: (*redis.Client)(nil), Key: make([]byte, 32)}, "Config.Redis"},
	}
	for _, tc := range cases {
		if _, err := apps.New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err = %v, want one naming %s", tc.cfg, err, tc.want)
		}
	}
}

// A WeCom third-party token has one name whether or not this replica had
// learned the suite token its get_corp_token carried (the SDK may have
// cached it before the process started): named by the suite where it was
// known and by a placeholder where it was not, one token got two names, a
// conflict, and was trusted for neither.
func TestWeComCorpTokenOneNameWhateverTheSuiteToken(t *testing.T) {
	book := apps.MustNew(withLoopback(apps.Config{}))
	srv := exchangeServer(t, `{"errcode":0,"access_token":"CORPTOKEN_1","expires_in":7200}`)
	client := &http.Client{Transport: book.Observe(http.DefaultTransport)}
	exchange := func(suiteToken string) {
		t.Helper()
		req, _ := http.NewRequest("POST", srv.URL+"/cgi-bin/service/get_corp_token?suite_access_token="+suiteToken,
			strings.NewReader(`{"auth_corpid":"wwB","permanent_code":"P"}`))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	ctx := context.Background()
	exchange("SUITETOKEN_UNSEEN")
	if err := book.Learn(ctx, "SUITETOKEN_KNOWN", apps.App{Provider: "wecom", ID: "wwSuite"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	exchange("SUITETOKEN_KNOWN") // the same token handed out again
	app, ok := book.Lookup(ctx, "CORPTOKEN_1")
	if want := (apps.App{Provider: "wecom", ID: "suite", Org: "wwB", Learned: true}); !ok || app != want {
		t.Fatalf("Lookup = %+v %v, want %+v (conflicts: %d)", app, ok, want, book.Stats().Conflicts)
	}
}
