package exchanges

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"

	"github.com/quotaware/throttle/internal/apipath"
)

// Provider names, the presets' profile names.
const (
	DingTalk = "dingtalk"
	WeChat   = "wechat"
	WeCom    = "wecom"
	Feishu   = "feishu"
)

// Providers are the provider names, in one list.
var Providers = []string{DingTalk, WeChat, WeCom, Feishu}

// Kind is one kind of token exchange.
type Kind struct {
	Provider string
	// WithCode: the provider always sends its success code (errcode or
	// code 0); an answer without one is not a success.
	WithCode bool
	// names reads the app (and org) the request names; lookup resolves a
	// token the request carries to the ID of its app.
	names func(path string, q url.Values, b *Request, lookup Lookup) (app, org string)
	// credential returns the values that identify what the exchange
	// fetches, secret included, or nil; nil credential: never shared.
	credential func(method, path string, q url.Values, b *Request) (cred []string, force bool)
	// tokens returns the tokens the answer hands out.
	tokens func(path string, a *Answer) []Token
}

// Lookup resolves a token a request carries (a Feishu store app's
// app_access_token) to the ID of the app it belongs to.
type Lookup func(token string) (app string, ok bool)

// Token is a token an answer hands out. AppOnly marks a Feishu
// app_access_token, the app's own, not the tenant's the request names.
type Token struct {
	Value   string
	AppOnly bool
}

// For returns the kind of exchange a request is, or nil. Paths are
// distinct across the four providers; whether the request went to the
// provider at all is the caller's check. The path, here and in every
// function of the package, is the request's path as sent (apipath.Sent):
// a URL written with Opaque has no Path, and read by its Path an exchange
// was neither shared nor known to rotate.
func For(method, path string) *Kind {
	path = apipath.Clean(path)
	switch {
	case path == "/gettoken" && method == http.MethodGet:
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

// Rotates reports an exchange each call of which issues a new token and
// retires the one before (WeChat's GET /cgi-bin/token): though a GET, it
// is not idempotent, and sent twice it charges the account's daily count
// twice and invalidates the token the first call handed out.
func Rotates(method, path string) bool {
	return method == http.MethodGet && apipath.Clean(path) == "/cgi-bin/token"
}

// Names returns the app (and org or tenant) the request names; "" when it
// names none.
func (k *Kind) Names(path string, q url.Values, b *Request, lookup Lookup) (app, org string) {
	path = apipath.Clean(path)
	if lookup == nil {
		lookup = func(string) (string, bool) { return "", false }
	}
	return k.names(path, q, b, lookup)
}

// Credential returns what the exchange presents to identify what it
// fetches, secret included, or nil when it presents none whole or its kind
// is not shared (DingTalk's /service/get_corp_token, whose signature
// changes on every call; a query credential sent other than by GET). force
// reports a request for a new token (WeChat stable_token force_refresh).
func (k *Kind) Credential(method, path string, q url.Values, b *Request) (cred []string, force bool) {
	path = apipath.Clean(path)
	if k.credential == nil {
		return nil, false
	}
	return k.credential(method, path, q, b)
}

// Tokens returns the tokens an answer hands out, the one the SDK sends
// afterwards first; empty members are left out.
func (k *Kind) Tokens(path string, a *Answer) []Token {
	path = apipath.Clean(path)
	var out []Token
	for _, t := range k.tokens(path, a) {
		if t.Value != "" {
			out = append(out, t)
		}
	}
	return out
}

// Request holds the request members the exchanges name their app and
// present their credential in.
type Request struct {
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

// ParseRequest reads a request body's members; a body that is not a JSON
// object yields what it could read.
func ParseRequest(b []byte) *Request {
	var r Request
	if len(b) > 0 {
		_ = json.Unmarshal(b, &r)
	}
	return &r
}

// Answer holds the members of an exchange's answer that are read.
type Answer struct {
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

// ParseAnswer reads an exchange's answer and checks it as the provider
// states success: errcode or code 0 (a string code, as DingTalk's new API
// fails with, does not parse), and present when the kind always sends it.
func (k *Kind) ParseAnswer(b []byte) (*Answer, bool) {
	var a Answer
	if json.Unmarshal(b, &a) != nil {
		return nil, false
	}
	if (a.ErrCode != nil && *a.ErrCode != 0) || (a.Code != nil && *a.Code != 0) {
		return nil, false
	}
	if k.WithCode && a.ErrCode == nil && a.Code == nil {
		return nil, false
	}
	return &a, true
}

// Lifetime returns the largest lifetime member the answer states, in
// seconds, and how many it states (expires_in, expireIn, expire).
func (a *Answer) Lifetime() (seconds int64, members int) {
	for _, l := range []*int64{a.ExpiresIn, a.ExpireIn, a.Expire} {
		if l != nil {
			if members == 0 || *l > seconds {
				seconds = *l
			}
			members++
		}
	}
	return seconds, members
}

// AccessToken is the access_token or accessToken member.
func (a *Answer) AccessToken() string {
	if a.AccessTokenSnake != "" {
		return a.AccessTokenSnake
	}
	return a.AccessTokenCamel
}
