package tokens

import (
	"encoding/json"
	"github.com/quotaware/throttle/internal/tokenform"
	"net/url"
	"strings"
)

// Provider names, as the presets name their profiles.
const (
	dingtalk = "dingtalk"
	wechat   = "wechat"
	wecom    = "wecom"
	feishu   = "feishu"
)

// exchange is one kind of token call: how its request presents the
// credential, and how its answer states success, token and lifetime.
type exchange struct {
	provider string
	// credential returns the values that identify what the exchange
	// fetches, secret included, or nil when the request does not present
	// one (it is then sent as it came). force reports a request that asks
	// for a new token (stable_token force_refresh).
	credential func(path string, q url.Values, b body) (cred []string, force bool)
	// token is the member of the answer that holds the token the SDK
	// sends afterwards, the one healing looks for.
	token func(a *answer) string
	// withCode: the provider always sends its success code (errcode or
	// code 0); an answer without one is not a success.
	withCode bool
}

// exchangeFor returns the exchange a request is, or nil. Paths are distinct
// across the four providers.
func exchangeFor(method, path string) *exchange {
	switch {
	case path == "/gettoken" && method == "GET":
		return &dingtalkGettoken
	case path == "/v1.0/oauth2/accessToken", path == "/v1.0/oauth2/corpAccessToken",
		strings.HasPrefix(path, "/v1.0/oauth2/") && strings.HasSuffix(path, "/token"):
		return &dingtalkOAuth
	case path == "/cgi-bin/token" && method == "GET", path == "/cgi-bin/stable_token":
		return &wechatToken
	case path == "/cgi-bin/gettoken" && method == "GET":
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

// body holds the request members the exchanges present credentials in.
type body struct {
	AppKey       string `json:"appKey"`
	AppSecret    string `json:"appSecret"`
	ClientID     string `json:"client_id"`
	ClientSecret string `json:"client_secret"`
	SuiteKey     string `json:"suiteKey"`
	SuiteSecret  string `json:"suiteSecret"`
	AuthCorpID   string `json:"authCorpId"`
	AuthCorpID2  string `json:"auth_corpid"`
	PermCode     string `json:"permanent_code"`
	AppID        string `json:"appid"`
	Secret       string `json:"secret"`
	ForceRefresh bool   `json:"force_refresh"`
	SuiteID      string `json:"suite_id"`
	SuiteSecret2 string `json:"suite_secret"`
	FeishuAppID  string `json:"app_id"`
	FeishuSecret string `json:"app_secret"`
	AppToken     string `json:"app_access_token"`
	TenantKey    string `json:"tenant_key"`
}

// all returns cred when every value is present, else nil: an exchange
// missing part of its credential is the provider's to refuse.
func all(cred ...string) []string {
	for _, c := range cred {
		if c == "" {
			return nil
		}
	}
	return cred
}

func accessToken(a *answer) string {
	if a.AccessTokenSnake != "" {
		return a.AccessTokenSnake
	}
	return a.AccessTokenCamel
}

var (
	// GET /gettoken?appkey=&appsecret= (legacy corpid=&corpsecret=).
	dingtalkGettoken = exchange{provider: dingtalk, withCode: true, token: accessToken,
		credential: func(_ string, q url.Values, _ body) ([]string, bool) {
			if q.Get("appkey") != "" {
				return all("appkey", q.Get("appkey"), q.Get("appsecret")), false
			}
			return all("corpid", q.Get("corpid"), q.Get("corpsecret")), false
		}}
	// POST /v1.0/oauth2/accessToken {appKey, appSecret}; ISV
	// corpAccessToken {suiteKey, suiteSecret, authCorpId};
	// /v1.0/oauth2/{corpId}/token {client_id, client_secret}.
	dingtalkOAuth = exchange{provider: dingtalk, token: accessToken,
		credential: func(path string, _ url.Values, b body) ([]string, bool) {
			switch path {
			case "/v1.0/oauth2/accessToken":
				return all(b.AppKey, b.AppSecret), false
			case "/v1.0/oauth2/corpAccessToken":
				return all(b.SuiteKey, b.SuiteSecret, b.AuthCorpID), false
			}
			return all(b.ClientID, b.ClientSecret), false
		}}
	// GET /cgi-bin/token?appid=&secret=; POST /cgi-bin/stable_token
	// {appid, secret, force_refresh}. The two issue different tokens: the
	// path is part of every derivation.
	wechatToken = exchange{provider: wechat, token: accessToken,
		credential: func(path string, q url.Values, b body) ([]string, bool) {
			if path == "/cgi-bin/token" {
				return all(q.Get("appid"), q.Get("secret")), false
			}
			return all(b.AppID, b.Secret), b.ForceRefresh
		}}
	// GET qyapi /cgi-bin/gettoken?corpid=&corpsecret=.
	wecomGettoken = exchange{provider: wecom, withCode: true, token: accessToken,
		credential: func(_ string, q url.Values, _ body) ([]string, bool) {
			return all(q.Get("corpid"), q.Get("corpsecret")), false
		}}
	// POST /cgi-bin/service/get_suite_token {suite_id, suite_secret,
	// suite_ticket}: the ticket changes, the token does not.
	wecomSuiteToken = exchange{provider: wecom, token: func(a *answer) string { return a.SuiteAccessToken },
		credential: func(_ string, _ url.Values, b body) ([]string, bool) {
			return all(b.SuiteID, b.SuiteSecret2), false
		}}
	// POST /cgi-bin/service/get_corp_token?suite_access_token=
	// {auth_corpid, permanent_code}: the permanent code is the secret.
	wecomCorpToken = exchange{provider: wecom, token: accessToken,
		credential: func(_ string, _ url.Values, b body) ([]string, bool) {
			return all(b.AuthCorpID2, b.PermCode), false
		}}
	// POST /open-apis/auth/v3/{tenant,app}_access_token/internal {app_id,
	// app_secret}; the store app's tenant form {app_access_token,
	// tenant_key}.
	feishuToken = exchange{provider: feishu, withCode: true,
		token: func(a *answer) string {
			if a.TenantAccessToken != "" {
				return a.TenantAccessToken
			}
			return a.AppAccessToken
		},
		credential: func(_ string, _ url.Values, b body) ([]string, bool) {
			if b.FeishuAppID != "" {
				return all(b.FeishuAppID, b.FeishuSecret), false
			}
			return all(b.AppToken, b.TenantKey), false
		}}
)

// answer holds the members of an exchange's answer that are checked.
type answer struct {
	ErrCode           *int   `json:"errcode"`
	Code              *int   `json:"code"`
	AccessTokenSnake  string `json:"access_token"`
	AccessTokenCamel  string `json:"accessToken"`
	SuiteAccessToken  string `json:"suite_access_token"`
	TenantAccessToken string `json:"tenant_access_token"`
	AppAccessToken    string `json:"app_access_token"`
	ExpiresIn         *int64 `json:"expires_in"`
	ExpireIn          *int64 `json:"expireIn"`
	Expire            *int64 `json:"expire"`
}

// Bounds of what is kept.
const (
	maxLifetime = 86400 // seconds: providers state 7,200
)

// check reads an exchange's answer as the provider states success and
// returns its token and lifetime in seconds; ok is false for anything not to
// be kept: an error code (45009, 40013, 40125, a string code as DingTalk's
// new API fails with), no token, a token of odd form, no lifetime or more
// than one, a lifetime out of bounds.
func (ex *exchange) check(b []byte) (token string, lifetime int64, ok bool) {
	var a answer
	if json.Unmarshal(b, &a) != nil {
		return "", 0, false
	}
	if (a.ErrCode != nil && *a.ErrCode != 0) || (a.Code != nil && *a.Code != 0) {
		return "", 0, false
	}
	if ex.withCode && a.ErrCode == nil && a.Code == nil {
		return "", 0, false
	}
	n := 0
	for _, l := range []*int64{a.ExpiresIn, a.ExpireIn, a.Expire} {
		if l != nil {
			lifetime = *l
			n++
		}
	}
	token = ex.token(&a)
	if n != 1 || lifetime < 1 || lifetime > maxLifetime || !tokenform.Sane(token) {
		return "", 0, false
	}
	return token, lifetime, true
}
