package exchanges

import (
	"net/http"
	"net/url"
	"strings"
)

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

func accessToken(_ string, a *Answer) []Token { return []Token{{Value: a.AccessToken()}} }

// orgOfPath is the corpId of DingTalk's /v1.0/oauth2/{corpId}/token, or ""
// when the path has more segments.
func orgOfPath(path string) (string, bool) {
	corp := strings.TrimSuffix(strings.TrimPrefix(path, "/v1.0/oauth2/"), "/token")
	return corp, !strings.Contains(corp, "/")
}

var (
	// GET oapi.dingtalk.com/gettoken?appkey=&appsecret= (legacy
	// corpid=&corpsecret=).
	dingtalkGettoken = Kind{Provider: DingTalk, WithCode: true, tokens: accessToken,
		names: func(_ string, q url.Values, _ *Request, _ Lookup) (string, string) {
			if app := q.Get("appkey"); app != "" {
				return app, ""
			}
			return q.Get("corpid"), ""
		},
		credential: func(_, _ string, q url.Values, _ *Request) ([]string, bool) {
			if q.Get("appkey") != "" {
				return all("appkey", q.Get("appkey"), q.Get("appsecret")), false
			}
			return all("corpid", q.Get("corpid"), q.Get("corpsecret")), false
		}}
	// POST /v1.0/oauth2/accessToken {appKey, appSecret}; ISV
	// corpAccessToken {suiteKey, suiteSecret, authCorpId};
	// /v1.0/oauth2/{corpId}/token {client_id, client_secret}.
	dingtalkOAuth = Kind{Provider: DingTalk, tokens: accessToken,
		names: func(path string, _ url.Values, b *Request, _ Lookup) (string, string) {
			switch path {
			case "/v1.0/oauth2/accessToken":
				return b.AppKey, ""
			case "/v1.0/oauth2/corpAccessToken":
				return b.SuiteKey, b.AuthCorpID
			}
			if corp, ok := orgOfPath(path); ok {
				return b.ClientID, corp
			}
			return "", ""
		},
		credential: func(_, path string, _ url.Values, b *Request) ([]string, bool) {
			switch path {
			case "/v1.0/oauth2/accessToken":
				return all(b.AppKey, b.AppSecret), false
			case "/v1.0/oauth2/corpAccessToken":
				return all(b.SuiteKey, b.SuiteSecret, b.AuthCorpID), false
			}
			return all(b.ClientID, b.ClientSecret), false
		}}
	// POST oapi.dingtalk.com/service/get_corp_token?accessKey=<suiteKey>
	// {auth_corpid}: signed anew on every call, never shared. Its answer is
	// documented as {access_token, expires_in}, without errcode: one with
	// errcode 0 is read too, one with another code is not a token.
	dingtalkCorpToken = Kind{Provider: DingTalk, tokens: accessToken,
		names: func(_ string, q url.Values, b *Request, _ Lookup) (string, string) {
			return q.Get("accessKey"), b.AuthCorpID2
		}}
	// GET /cgi-bin/token?appid=&secret=; POST /cgi-bin/stable_token
	// {appid, secret, force_refresh}. The two issue different tokens: the
	// path is part of every derivation of package tokens.
	wechatToken = Kind{Provider: WeChat, tokens: accessToken,
		names: func(_ string, q url.Values, b *Request, _ Lookup) (string, string) {
			if app := q.Get("appid"); app != "" {
				return app, ""
			}
			return b.AppID, ""
		},
		credential: func(method, path string, q url.Values, b *Request) ([]string, bool) {
			if path == "/cgi-bin/token" {
				if method != http.MethodGet {
					return nil, false
				}
				return all(q.Get("appid"), q.Get("secret")), false
			}
			return all(b.AppID, b.Secret), b.ForceRefresh
		}}
	// GET qyapi.weixin.qq.com/cgi-bin/gettoken?corpid=&corpsecret=: the
	// company is what WeCom limits, so the corp is the app.
	wecomGettoken = Kind{Provider: WeCom, WithCode: true, tokens: accessToken,
		names: func(_ string, q url.Values, _ *Request, _ Lookup) (string, string) {
			return q.Get("corpid"), ""
		},
		credential: func(method, _ string, q url.Values, _ *Request) ([]string, bool) {
			if method != http.MethodGet {
				return nil, false
			}
			return all(q.Get("corpid"), q.Get("corpsecret")), false
		}}
	// POST /cgi-bin/service/get_suite_token {suite_id, suite_secret,
	// suite_ticket}: the suite's own token (the ticket changes, the token
	// does not), which its get_corp_token calls carry.
	wecomSuiteToken = Kind{Provider: WeCom,
		tokens: func(_ string, a *Answer) []Token { return []Token{{Value: a.SuiteAccessToken}} },
		names: func(_ string, _ url.Values, b *Request, _ Lookup) (string, string) {
			return b.SuiteID, ""
		},
		credential: func(_, _ string, _ url.Values, b *Request) ([]string, bool) {
			return all(b.SuiteID, b.SuiteSecret2), false
		}}
	// POST /cgi-bin/service/get_corp_token?suite_access_token=
	// {auth_corpid, permanent_code}: a third-party app's token for one
	// authorised company; the permanent code is the secret. WeCom limits
	// the company, so the token is named by it alone, under the one app ID
	// "suite": named by its suite where the replica had learned the suite
	// token and by "suite" where it had not (a suite token the SDK cached
	// before the process started, a lookup that timed out), one token got
	// two names, a conflict, and was trusted for neither on any replica.
	wecomCorpToken = Kind{Provider: WeCom, tokens: accessToken,
		names: func(_ string, _ url.Values, b *Request, _ Lookup) (string, string) {
			return "suite", b.AuthCorpID2
		},
		credential: func(_, _ string, _ url.Values, b *Request) ([]string, bool) {
			return all(b.AuthCorpID2, b.PermCode), false
		}}
	// POST /open-apis/auth/v3/{tenant,app}_access_token[/internal]: the
	// internal forms name the app (app_id, app_secret); the store app's
	// tenant form names it by its app_access_token and the tenant by
	// tenant_key.
	feishuToken = Kind{Provider: Feishu, WithCode: true,
		tokens: func(path string, a *Answer) []Token {
			ts := []Token{{Value: a.TenantAccessToken}}
			if strings.Contains(path, "app_access_token") {
				ts = append(ts, Token{Value: a.AppAccessToken, AppOnly: true})
			}
			return ts
		},
		names: func(_ string, _ url.Values, b *Request, lookup Lookup) (string, string) {
			app, tenant := b.FeishuAppID, ""
			if app == "" && b.AppToken != "" {
				if s, ok := lookup(b.AppToken); ok {
					app = s
				}
				tenant = b.TenantKey
			}
			return app, tenant
		},
		credential: func(_, _ string, _ url.Values, b *Request) ([]string, bool) {
			if b.FeishuAppID != "" {
				return all(b.FeishuAppID, b.FeishuSecret), false
			}
			return all(b.AppToken, b.TenantKey), false
		}}
)
