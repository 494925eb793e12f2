package tokens

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/providers/dingtalk/dingtalktest"
	"github.com/quotaware/throttle/providers/feishu/feishutest"
	"github.com/quotaware/throttle/providers/wecom/wecomtest"
)

// Every provider's exchange is shared: two replicas, one request at the
// emulator, the same token with its lifetime member counted down.
func TestEachProviderShares(t *testing.T) {
	srv := redistest.Start(t)
	ding := dingtalktest.New(dingtalktest.Options{})
	defer ding.Close()
	wecom := wecomtest.NewServer(wecomtest.Options{})
	defer wecom.Close()
	lark := feishutest.NewServer(feishutest.Options{})
	defer lark.Close()
	cases := []struct {
		name, method, url, body, lifetime string
		requests                          func() int
	}{
		{"dingtalk gettoken", "GET", ding.URL + "/gettoken?appkey=dingA&appsecret=S1", "", "expires_in", func() int { return len(ding.Requests()) }},
		{"dingtalk accessToken", "POST", ding.URL + "/v1.0/oauth2/accessToken", `{"appKey":"dingA","appSecret":"S1"}`, "expireIn", func() int { return len(ding.Requests()) }},
		{"dingtalk corpAccessToken", "POST", ding.URL + "/v1.0/oauth2/corpAccessToken",
			`{"suiteKey":"suiteS","suiteSecret":"S2","authCorpId":"corp1","suiteTicket":"T"}`, "expireIn", func() int { return len(ding.Requests()) }},
		{"wecom gettoken", "GET", wecom.URL + "/cgi-bin/gettoken?corpid=ww1&corpsecret=S3", "", "expires_in", func() int { return len(wecom.Requests()) }},
		{"feishu tenant token", "POST", lark.URL + "/open-apis/auth/v3/tenant_access_token/internal", `{"app_id":"cli_a","app_secret":"S4"}`, "expire", func() int { return len(lark.Requests()) }},
	}
	var clients []*http.Client
	for range 2 {
		s, err := New(srv.Client(t), WithPrefix("each"))
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, &http.Client{Transport: s.Wrap(http.DefaultTransport)})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.requests()
			var answers []map[string]any
			for _, c := range clients {
				req, _ := http.NewRequest(tc.method, tc.url, strings.NewReader(tc.body))
				req.Header.Set("Content-Type", "application/json")
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				var m map[string]any
				if err := json.Unmarshal(b, &m); err != nil {
					t.Fatalf("%s: %v", b, err)
				}
				if _, ok := m[tc.lifetime]; !ok {
					t.Fatalf("answer %s has no %s", b, tc.lifetime)
				}
				answers = append(answers, m)
			}
			if n := tc.requests() - before; n != 1 {
				t.Errorf("%d requests at the emulator, want 1", n)
			}
			if len(answers[0]) != len(answers[1]) {
				t.Errorf("answers differ: %v, %v", answers[0], answers[1])
			}
			for k, v := range answers[0] {
				if k != tc.lifetime && answers[1][k] != v {
					t.Errorf("member %s: %v, then %v", k, v, answers[1][k])
				}
			}
		})
	}
}

// Only answers that pass the provider's checks are kept.
func TestCheckRefuses(t *testing.T) {
	const wx = "/cgi-bin/token"
	good := `{"access_token":"ACCESS_TOKEN_0123","expires_in":7200}`
	if _, _, ok := check(exchangeFor("GET", wx), wx, []byte(good)); !ok {
		t.Fatalf("a good answer refused: %s", good)
	}
	for _, tc := range []struct {
		path string
		body string
	}{
		{wx, `{"errcode":45009,"errmsg":"reach max api daily quota limit"}`},
		{wx, `{"errcode":40013,"errmsg":"invalid appid","access_token":"ACCESS_TOKEN_0123","expires_in":7200}`},
		{wx, `{"errcode":40125,"errmsg":"invalid appsecret"}`},
		{"/cgi-bin/gettoken", `{"errcode":40001,"access_token":"ACCESS_TOKEN_0123","expires_in":7200}`},
		{"/cgi-bin/gettoken", `{"access_token":"ACCESS_TOKEN_0123","expires_in":7200}`}, // no errcode: WeCom always sends it
		{"/v1.0/oauth2/accessToken", `{"code":"invalidClientIdOrSecret","message":"x"}`},
		{"/open-apis/auth/v3/tenant_access_token/internal", `{"code":10014,"msg":"app secret invalid"}`},
		{wx, `<html>502</html>`},
		{wx, `{"access_token":"ACCESS_TOKEN_0123"}`},                                 // no lifetime
		{wx, `{"access_token":"ACCESS_TOKEN_0123","expires_in":0}`},                  // zero
		{wx, `{"access_token":"ACCESS_TOKEN_0123","expires_in":-5}`},                 // negative
		{wx, `{"access_token":"ACCESS_TOKEN_0123","expires_in":999999999}`},          // absurd
		{wx, `{"access_token":"ACCESS_TOKEN_0123","expires_in":7200,"expire":7200}`}, // two
		{wx, `{"access_token":"short","expires_in":7200}`},
		{wx, `{"access_token":"has spaces in it","expires_in":7200}`},
		{wx, `{"expires_in":7200}`},
	} {
		if toks, life, ok := check(exchangeFor("GET", tc.path), tc.path, []byte(tc.body)); ok {
			t.Errorf("%s %s kept (tokens %+v, %d s)", tc.path, tc.body, toks, life)
		}
	}
}

// The invalid-token answers of each provider, and nothing else, heal.
func TestInvalidToken(t *testing.T) {
	for _, tc := range []struct {
		provider string
		status   int
		body     string
		want     bool
	}{
		{wechat, 200, `{"errcode":40001,"errmsg":"invalid credential, access_token is invalid or not latest"}`, true},
		{wechat, 200, `{"errcode":42001,"errmsg":"access_token expired"}`, true},
		{wechat, 200, `{"errcode":40014,"errmsg":"invalid access_token"}`, true},
		{wechat, 200, `{"errcode":45009,"errmsg":"reach max api daily quota limit"}`, false},
		{wecom, 200, `{"errcode":42001,"errmsg":"access_token expired"}`, true},
		{dingtalk, 200, `{"errcode":40014,"errmsg":"不合法的access_token"}`, true},
		{dingtalk, 200, `{"errcode":88,"errmsg":"ding talk error[subcode=40014,submsg=不合法的access_token]","sub_code":"40014","sub_msg":"不合法的access_token","request_id":"x"}`, true},
		{dingtalk, 200, `{"errcode":88,"sub_code":40014,"sub_msg":"不合法的access_token"}`, true},
		{dingtalk, 200, `{"errcode":88,"sub_code":"90018","sub_msg":"40014 calls"}`, false},
		{dingtalk, 401, `{"code":"InvalidAuthentication","message":"不合法的access_token"}`, true},
		{dingtalk, 403, `{"code":"Forbidden.AccessDenied.QpsLimitForAppkeyAndApi"}`, false},
		{feishu, 400, `{"code":99991663,"msg":"Invalid access token for authorization."}`, true},
		{feishu, 400, `{"code":99991400,"msg":"request trigger frequency limit"}`, false},
		{wechat, 200, `not json`, false},
	} {
		if got := invalidToken(tc.provider, tc.status, []byte(tc.body)); got != tc.want {
			t.Errorf("%s %d %s: %v, want %v", tc.provider, tc.status, tc.body, got, tc.want)
		}
	}
}

// A DingTalk old-API call that carries its token as a form field, as some
// are documented to, is watched as one with the token in its query: a
// refusal (40014, the token invalidated early) heals the kept answer, and
// the next exchange fetches a new token. Before, only headers and the
// query were read, and the fleet was handed the refused token until its
// kept answer ended.
func TestFormBodyTokenRefusalHeals(t *testing.T) {
	srv := redistest.Start(t)
	ding := dingtalktest.New(dingtalktest.Options{})
	defer ding.Close()
	s, err := New(srv.Client(t), WithPrefix("formbody"))
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: s.Wrap(http.DefaultTransport)}
	exchange := func() string {
		t.Helper()
		resp, err := c.Get(ding.URL + "/gettoken?appkey=dingA&appsecret=S1")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var a struct {
			AccessToken string `json:"access_token"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&a); err != nil || a.AccessToken == "" {
			t.Fatalf("exchange: %v %+v", err, a)
		}
		return a.AccessToken
	}
	tok := exchange()
	ding.Revoke(tok)
	body := "access_token=" + tok + "&userid=u1"
	resp, err := c.Post(ding.URL+"/topapi/v2/user/get", "application/x-www-form-urlencoded", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), "40014") {
		t.Fatalf("the call with the revoked token answered %s, want 40014", b)
	}
	if st := s.Stats(); st.Healed != 1 {
		t.Fatalf("stats %+v, want the refusal healed", st)
	}
	if next := exchange(); next == tok {
		t.Fatal("the exchange after the refusal was handed the refused token")
	}
}
