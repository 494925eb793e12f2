package exchanges

import (
	"net/url"
	"testing"
)

// Each exchange is recognised by method and path, names its app from the
// same members its credential is read from, and only the kinds that can
// be shared present a credential.
func TestKinds(t *testing.T) {
	for _, tc := range []struct {
		method, path, query, body string
		provider, app, org        string
		shared                    bool
	}{
		{"GET", "/gettoken", "appkey=dingA&appsecret=S", "", DingTalk, "dingA", "", true},
		{"GET", "/gettoken", "corpid=dingC&corpsecret=S", "", DingTalk, "dingC", "", true},
		{"POST", "/v1.0/oauth2/accessToken", "", `{"appKey":"dingA","appSecret":"S"}`, DingTalk, "dingA", "", true},
		{"POST", "/v1.0/oauth2/corpAccessToken", "", `{"suiteKey":"suite","suiteSecret":"S","authCorpId":"corp1"}`, DingTalk, "suite", "corp1", true},
		{"POST", "/v1.0/oauth2/corp9/token", "", `{"client_id":"dingA","client_secret":"S"}`, DingTalk, "dingA", "corp9", true},
		{"POST", "/service/get_corp_token", "accessKey=suite&signature=x", `{"auth_corpid":"corp1"}`, DingTalk, "suite", "corp1", false},
		{"GET", "/cgi-bin/token", "appid=wxA&secret=S", "", WeChat, "wxA", "", true},
		{"POST", "/cgi-bin/token", "appid=wxA&secret=S", "", WeChat, "wxA", "", false},
		{"POST", "/cgi-bin/stable_token", "", `{"appid":"wxA","secret":"S"}`, WeChat, "wxA", "", true},
		{"GET", "/cgi-bin/gettoken", "corpid=ww1&corpsecret=S", "", WeCom, "ww1", "", true},
		{"POST", "/cgi-bin/service/get_suite_token", "", `{"suite_id":"s1","suite_secret":"S"}`, WeCom, "s1", "", true},
		{"POST", "/cgi-bin/service/get_corp_token", "suite_access_token=T", `{"auth_corpid":"ww2","permanent_code":"P"}`, WeCom, "suite", "ww2", true},
		{"POST", "/open-apis/auth/v3/tenant_access_token/internal", "", `{"app_id":"cli_a","app_secret":"S"}`, Feishu, "cli_a", "", true},
	} {
		k := For(tc.method, tc.path)
		if k == nil || k.Provider != tc.provider {
			t.Errorf("%s %s: %v, want %s", tc.method, tc.path, k, tc.provider)
			continue
		}
		q, _ := url.ParseQuery(tc.query)
		b := ParseRequest([]byte(tc.body))
		if app, org := k.Names(tc.path, q, b, nil); app != tc.app || org != tc.org {
			t.Errorf("%s %s names %q %q, want %q %q", tc.method, tc.path, app, org, tc.app, tc.org)
		}
		if cred, _ := k.Credential(tc.method, tc.path, q, b); (cred != nil) != tc.shared {
			t.Errorf("%s %s credential %v, want shared %v", tc.method, tc.path, cred != nil, tc.shared)
		}
	}
	if For("GET", "/cgi-bin/user/info") != nil || For("POST", "/gettoken") != nil {
		t.Error("a call that is not an exchange recognised as one")
	}
}

// A Feishu app_access_token answer hands out the tenant's token first and
// the app's own second; empty members are left out.
func TestTokens(t *testing.T) {
	k := For("POST", "/open-apis/auth/v3/app_access_token/internal")
	a, ok := k.ParseAnswer([]byte(`{"code":0,"app_access_token":"APPTOKEN-1","tenant_access_token":"TENANT-1","expire":7200}`))
	if !ok {
		t.Fatal("answer refused")
	}
	got := k.Tokens("/open-apis/auth/v3/app_access_token/internal", a)
	if len(got) != 2 || got[0] != (Token{Value: "TENANT-1"}) || got[1] != (Token{Value: "APPTOKEN-1", AppOnly: true}) {
		t.Fatalf("tokens %+v", got)
	}
	if life, n := a.Lifetime(); life != 7200 || n != 1 {
		t.Fatalf("lifetime %d (%d members)", life, n)
	}
	if _, ok := k.ParseAnswer([]byte(`{"tenant_access_token":"TENANT-1","expire":7200}`)); ok {
		t.Fatal("an answer without Feishu's code accepted")
	}
}

// DingTalk's old ISV exchange answers {access_token, expires_in} as
// documented, without errcode; a failure's code still refuses it.
func TestDingTalkCorpTokenAnswerWithoutCode(t *testing.T) {
	k := For("POST", "/service/get_corp_token")
	if k == nil {
		t.Fatal("get_corp_token not an exchange")
	}
	for _, answer := range []string{
		`{"access_token":"CORPTOKEN-1","expires_in":7200}`,
		`{"errcode":0,"errmsg":"ok","access_token":"CORPTOKEN-1","expires_in":7200}`,
	} {
		a, ok := k.ParseAnswer([]byte(answer))
		if !ok || len(k.Tokens("/service/get_corp_token", a)) != 1 {
			t.Errorf("%s: refused", answer)
		}
	}
	if _, ok := k.ParseAnswer([]byte(`{"errcode":40014,"errmsg":"invalid","access_token":"x"}`)); ok {
		t.Error("a failure's answer accepted")
	}
}

// An exchange is known whatever the spelling of its path (apipath.Clean).
func TestExchangesKnownAsTheFrontEndsReadThem(t *testing.T) {
	if !Rotates("GET", "//cgi-bin/token") || !Rotates("GET", "/cgi-bin/./token") || For("GET", "/gettoken/") == nil ||
		For("POST", "//cgi-bin/stable_token") == nil {
		t.Error("an exchange spelled with a repeated or trailing slash, or a dot segment, is not known")
	}
}
