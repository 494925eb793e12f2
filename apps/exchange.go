package apps

import (
	"encoding/json"
	"github.com/quotaware/throttle/internal/tokenform"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/quotaware/throttle/providers"
)

// Provider names, the presets' profile names.
const (
	nameDingTalk = "dingtalk"
	nameWeChat   = "wechat"
	nameWeCom    = "wecom"
	nameFeishu   = "feishu"
)

// grant is one token an exchange handed out, and whose it is.
type grant struct {
	token string
	app   App
	ttl   time.Duration
}

// exchange reads one kind of token call: the app from the request (query
// and body), the token from the answer. lookup resolves a token the
// request itself carries (a suite's or an app's token that names the app of
// a tenant token).
type exchange struct {
	provider string
	read     func(path string, q url.Values, reqBody, respBody []byte, lookup func(string) (App, bool)) []grant
	// names reads the app (and org) from the request alone, before it is
	// sent, so that the exchange is charged to the app it names.
	names func(path string, q url.Values, reqBody []byte, lookup func(string) (App, bool)) (app, org string)
}

// exchangeFor returns the exchange a request path is, or nil. Paths are
// distinct across the four providers; whether the request went to the
// provider at all is Observe's check (fromProvider).
func exchangeFor(method, path string) *exchange {
	switch {
	case path == "/gettoken" && method == "GET":
		return &dingtalkGettoken
	case path == "/v1.0/oauth2/accessToken", path == "/v1.0/oauth2/corpAccessToken",
		strings.HasPrefix(path, "/v1.0/oauth2/") && strings.HasSuffix(path, "/token"):
		return &dingtalkOAuth
	case path == "/service/get_corp_token":
		return &dingtalkCorpToken
	case path == "/cgi-bin/token", path == "/cgi-bin/stable_token":
		return &wechatToken
	case path == "/cgi-bin/gettoken":
		return &wecomGettoken
	case path == "/cgi-bin/service/get_suite_token":
		return &wecomSuiteToken
	case path == "/cgi-bin/service/get_corp_token":
		return &wecomCorpToken
	case strings.HasPrefix(path, "/open-apis/auth/v3/tenant_access_token"),
		strings.HasPrefix(path, "/open-apis/auth/v3/app_access_token"):
		return &feishuToken
	}
	return nil
}

// answer holds every token and lifetime member the providers use.
type answer struct {
	ErrCode           *int   `json:"errcode"`
	Code              *int   `json:"code"`
	AccessTokenSnake  string `json:"access_token"`
	AccessTokenCamel  string `json:"accessToken"`
	SuiteAccessToken  string `json:"suite_access_token"`
	TenantAccessToken string `json:"tenant_access_token"`
	AppAccessToken    string `json:"app_access_token"`
	ExpiresIn         int64  `json:"expires_in"`
	ExpireIn          int64  `json:"expireIn"`
	Expire            int64  `json:"expire"`
}

// parseAnswer reads an exchange's answer and checks it as the provider
// states success: errcode or code 0 (a string code, as DingTalk's new API
// fails with, does not parse), and present when the provider always sends
// it (withCode).
func parseAnswer(body []byte, withCode bool) (answer, bool) {
	var a answer
	if json.Unmarshal(body, &a) != nil {
		return a, false
	}
	if (a.ErrCode != nil && *a.ErrCode != 0) || (a.Code != nil && *a.Code != 0) {
		return a, false
	}
	if withCode && a.ErrCode == nil && a.Code == nil {
		return a, false
	}
	return a, true
}

// Bounds of what an answer may state (a token's form is tokenform.Sane's).
const (
	// minTokenTTL is the shortest lifetime an answer may state (providers
	// state 7,200 s, WeChat's stable token at least 300 s; emulators scale
	// time down): a missing, zero or negative one is not an answer to trust.
	minTokenTTL = time.Second
)

func (a *answer) ttl() time.Duration {
	s := max(a.ExpiresIn, a.ExpireIn, a.Expire)
	return time.Duration(s) * time.Second
}

func (a *answer) accessToken() string {
	if a.AccessTokenSnake != "" {
		return a.AccessTokenSnake
	}
	return a.AccessTokenCamel
}

// one returns a single grant when token and app are known and sane, and
// the lifetime stated is one a provider states.
func one(provider, token, app, org string, ttl time.Duration) []grant {
	if !tokenform.Sane(token) || app == "" || ttl < minTokenTTL || ttl > maxTTL {
		return nil
	}
	if checkIdentity(App{Provider: provider, ID: app, Org: org}) != nil {
		return nil
	}
	return []grant{{token: token, app: App{Provider: provider, ID: app, Org: org}, ttl: ttl}}
}

// body decodes the request's JSON members the exchanges name the app with.
type body struct {
	AppKey      string `json:"appKey"`
	ClientID    string `json:"client_id"`
	SuiteKey    string `json:"suiteKey"`
	AuthCorpID  string `json:"authCorpId"`
	AuthCorpID2 string `json:"auth_corpid"`
	AppID       string `json:"appid"`
	FeishuAppID string `json:"app_id"`
	SuiteID     string `json:"suite_id"`
	AppToken    string `json:"app_access_token"`
	TenantKey   string `json:"tenant_key"`
}

func parseBody(b []byte) body {
	var v body
	_ = json.Unmarshal(b, &v)
	return v
}

var (
	// GET oapi.dingtalk.com/gettoken?appkey=&appsecret= (legacy corpid=&corpsecret=).
	dingtalkGettoken = exchange{provider: nameDingTalk, read: func(_ string, q url.Values, _, resp []byte, _ func(string) (App, bool)) []grant {
		a, ok := parseAnswer(resp, true)
		if !ok {
			return nil
		}
		app := q.Get("appkey")
		if app == "" {
			app = q.Get("corpid")
		}
		return one(nameDingTalk, a.accessToken(), app, "", a.ttl())
	}}
	// POST /v1.0/oauth2/accessToken {appKey}; /v1.0/oauth2/{corpId}/token
	// {client_id}; ISV /v1.0/oauth2/corpAccessToken {suiteKey, authCorpId}.
	dingtalkOAuth = exchange{provider: nameDingTalk, read: func(path string, _ url.Values, req, resp []byte, _ func(string) (App, bool)) []grant {
		a, ok := parseAnswer(resp, false)
		if !ok {
			return nil
		}
		b := parseBody(req)
		switch path {
		case "/v1.0/oauth2/accessToken":
			return one(nameDingTalk, a.accessToken(), b.AppKey, "", a.ttl())
		case "/v1.0/oauth2/corpAccessToken":
			return one(nameDingTalk, a.accessToken(), b.SuiteKey, b.AuthCorpID, a.ttl())
		}
		corp := strings.TrimSuffix(strings.TrimPrefix(path, "/v1.0/oauth2/"), "/token")
		if strings.Contains(corp, "/") {
			return nil
		}
		return one(nameDingTalk, a.accessToken(), b.ClientID, corp, a.ttl())
	}}
	// POST oapi.dingtalk.com/service/get_corp_token?accessKey=<suiteKey> {auth_corpid}.
	dingtalkCorpToken = exchange{provider: nameDingTalk, read: func(_ string, q url.Values, req, resp []byte, _ func(string) (App, bool)) []grant {
		a, ok := parseAnswer(resp, true)
		if !ok {
			return nil
		}
		return one(nameDingTalk, a.accessToken(), q.Get("accessKey"), parseBody(req).AuthCorpID2, a.ttl())
	}}
	// GET /cgi-bin/token?appid=; POST /cgi-bin/stable_token {appid}.
	wechatToken = exchange{provider: nameWeChat, read: func(_ string, q url.Values, req, resp []byte, _ func(string) (App, bool)) []grant {
		a, ok := parseAnswer(resp, false)
		if !ok {
			return nil
		}
		app := q.Get("appid")
		if app == "" {
			app = parseBody(req).AppID
		}
		return one(nameWeChat, a.accessToken(), app, "", a.ttl())
	}}
	// GET qyapi.weixin.qq.com/cgi-bin/gettoken?corpid=&corpsecret=: the
	// company is what WeCom limits, so the corp is the app.
	wecomGettoken = exchange{provider: nameWeCom, read: func(_ string, q url.Values, _, resp []byte, _ func(string) (App, bool)) []grant {
		a, ok := parseAnswer(resp, true)
		if !ok {
			return nil
		}
		return one(nameWeCom, a.accessToken(), q.Get("corpid"), "", a.ttl())
	}}
	// POST /cgi-bin/service/get_suite_token {suite_id}: the suite's own
	// token, which later names the suite of get_corp_token.
	wecomSuiteToken = exchange{provider: nameWeCom, read: func(_ string, _ url.Values, req, resp []byte, _ func(string) (App, bool)) []grant {
		a, ok := parseAnswer(resp, false)
		if !ok {
			return nil
		}
		return one(nameWeCom, a.SuiteAccessToken, parseBody(req).SuiteID, "", a.ttl())
	}}
	// POST /cgi-bin/service/get_corp_token?suite_access_token= {auth_corpid}:
	// a third-party app's token for one authorised company.
	wecomCorpToken = exchange{provider: nameWeCom, read: func(_ string, q url.Values, req, resp []byte, lookup func(string) (App, bool)) []grant {
		a, ok := parseAnswer(resp, false)
		if !ok {
			return nil
		}
		corp := parseBody(req).AuthCorpID2
		suite := "suite"
		if s, ok := lookup(q.Get("suite_access_token")); ok {
			suite = s.ID
		}
		return one(nameWeCom, a.accessToken(), suite, corp, a.ttl())
	}}
	// POST /open-apis/auth/v3/{tenant,app}_access_token[/internal]: the
	// internal forms name the app (app_id); the store app's tenant form
	// names it by its app_access_token and the tenant by tenant_key.
	feishuToken = exchange{provider: nameFeishu, read: func(path string, _ url.Values, req, resp []byte, lookup func(string) (App, bool)) []grant {
		a, ok := parseAnswer(resp, true)
		if !ok {
			return nil
		}
		b := parseBody(req)
		app, tenant := b.FeishuAppID, ""
		if app == "" && b.AppToken != "" {
			if s, ok := lookup(b.AppToken); ok {
				app = s.ID
			}
			tenant = b.TenantKey
		}
		var gs []grant
		gs = append(gs, one(nameFeishu, a.TenantAccessToken, app, tenant, a.ttl())...)
		if strings.Contains(path, "app_access_token") {
			gs = append(gs, one(nameFeishu, a.AppAccessToken, app, "", a.ttl())...)
		}
		return gs
	}}
)

// maxNamesBody bounds the body Resolve peeks at: an exchange's request
// is a few hundred bytes, its naming members come first or close to it.
const maxNamesBody = 4 << 10

// exchangeApp returns the app (and org or tenant) the exchange ex names
// in req's query or body, and whether it names one. The Book resolves a
// token the request carries (a WeCom suite token, a Feishu app token); a
// nil Book resolves none.
func (b *Book) exchangeApp(req *http.Request, ex *exchange) (App, bool) {
	if ex.names == nil {
		return App{}, false
	}
	ctx := req.Context()
	lookup := func(tok string) (App, bool) {
		if b == nil || tok == "" {
			return App{}, false
		}
		return b.Lookup(ctx, tok)
	}
	var body []byte
	if req.Method != http.MethodGet {
		body, _ = providers.PeekRequestBody(req, maxNamesBody)
	}
	id, org := ex.names(req.URL.Path, req.URL.Query(), body, lookup)
	app := App{Provider: ex.provider, ID: id, Org: org}
	if id == "" || checkIdentity(app) != nil {
		return App{}, false
	}
	return app, true
}

// Names of the app in each exchange's request; read uses them too.

func dingtalkGettokenNames(_ string, q url.Values, _ []byte, _ func(string) (App, bool)) (string, string) {
	if app := q.Get("appkey"); app != "" {
		return app, ""
	}
	return q.Get("corpid"), ""
}

func dingtalkOAuthNames(path string, _ url.Values, req []byte, _ func(string) (App, bool)) (string, string) {
	b := parseBody(req)
	switch path {
	case "/v1.0/oauth2/accessToken":
		return b.AppKey, ""
	case "/v1.0/oauth2/corpAccessToken":
		return b.SuiteKey, b.AuthCorpID
	}
	corp := strings.TrimSuffix(strings.TrimPrefix(path, "/v1.0/oauth2/"), "/token")
	if strings.Contains(corp, "/") {
		return "", ""
	}
	return b.ClientID, corp
}

func dingtalkCorpTokenNames(_ string, q url.Values, req []byte, _ func(string) (App, bool)) (string, string) {
	return q.Get("accessKey"), parseBody(req).AuthCorpID2
}

func wechatTokenNames(_ string, q url.Values, req []byte, _ func(string) (App, bool)) (string, string) {
	if app := q.Get("appid"); app != "" {
		return app, ""
	}
	return parseBody(req).AppID, ""
}

func wecomGettokenNames(_ string, q url.Values, _ []byte, _ func(string) (App, bool)) (string, string) {
	return q.Get("corpid"), ""
}

func wecomSuiteTokenNames(_ string, _ url.Values, req []byte, _ func(string) (App, bool)) (string, string) {
	return parseBody(req).SuiteID, ""
}

func wecomCorpTokenNames(_ string, q url.Values, req []byte, lookup func(string) (App, bool)) (string, string) {
	suite := "suite"
	if s, ok := lookup(q.Get("suite_access_token")); ok {
		suite = s.ID
	}
	return suite, parseBody(req).AuthCorpID2
}

func feishuTokenNames(_ string, _ url.Values, req []byte, lookup func(string) (App, bool)) (string, string) {
	b := parseBody(req)
	app, tenant := b.FeishuAppID, ""
	if app == "" && b.AppToken != "" {
		if s, ok := lookup(b.AppToken); ok {
			app = s.ID
		}
		tenant = b.TenantKey
	}
	return app, tenant
}

func init() {
	dingtalkGettoken.names = dingtalkGettokenNames
	dingtalkOAuth.names = dingtalkOAuthNames
	dingtalkCorpToken.names = dingtalkCorpTokenNames
	wechatToken.names = wechatTokenNames
	wecomGettoken.names = wecomGettokenNames
	wecomSuiteToken.names = wecomSuiteTokenNames
	wecomCorpToken.names = wecomCorpTokenNames
	feishuToken.names = feishuTokenNames
}
