package wechat

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/quotaware/throttle/apps"
	"github.com/quotaware/throttle/providers"
	"github.com/quotaware/throttle/providers/internal/penaltytime"
)

// resetRequest is a reset (or any call) of path with body, tagged with the
// account tag unless it is empty.
func resetRequest(path, body, tag string) *http.Request {
	ctx := context.Background()
	if tag != "" {
		ctx = apps.NewContext(ctx, apps.App{Provider: Name, ID: tag})
	}
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://api.weixin.qq.com"+path+"?access_token=TOKEN", strings.NewReader(body))
	if err != nil {
		panic(err)
	}
	return r
}

func verdictOf(t *testing.T, p providers.Profile, req *http.Request, status int, body string) providers.Verdict {
	t.Helper()
	route, err := p.Route(req)
	if err != nil {
		t.Fatal(err)
	}
	return p.Classify(req, response(status, body), &route)
}

const resetOK = `{"errcode":0,"errmsg":"ok"}`

// A successful clear_quota of the account names the 45009 scopes of every
// API of the account (not the forced refreshes') and its daily rules;
// quota/clear one API's. Both need to be known as the account's.
func TestResetVerdicts(t *testing.T) {
	const app = "wx1234567890abcdef"
	p := testProfile(t, Config{Apps: []App{{AppID: app}}})
	send := "api:" + app + ":/cgi-bin/message/custom/send"

	v := verdictOf(t, p, resetRequest(clearQuotaPath, `{"appid":"`+app+`"}`, ""), 200, resetOK)
	if v.Kind != providers.OK || v.Cleared == nil || v.Cleared.Code != codeDailyQuota {
		t.Fatalf("clear_quota answered ok: %+v, want OK with Cleared of 45009", v)
	}
	var keys []string
	for _, r := range v.Cleared.Rules {
		keys = append(keys, r.Key())
	}
	if len(keys) != len(defaultDaily()) || !slices.Contains(keys, "day:"+app+":/cgi-bin/message/custom/send") {
		t.Errorf("cleared rules %v, want the %d daily rules of the account", keys, len(defaultDaily()))
	}
	for scope, want := range map[string]bool{
		send:                           true,
		"api:" + app + ":uncatalogued": true,
		"api:wxother:/cgi-bin/message/custom/send": false,
		"api:" + app + ":" + forcedRoute:           false,
	} {
		if got := slices.Contains(v.Cleared.Scopes, scope); got != want {
			t.Errorf("clear_quota ends %s: %v, want %v", scope, got, want)
		}
	}

	v = verdictOf(t, p, resetRequest(quotaClearPath, `{"cgi_path":"/cgi-bin/message/custom/send"}`, app), 200, resetOK)
	if v.Cleared == nil || len(v.Cleared.Rules) != 1 || v.Cleared.Rules[0].Key() != "day:"+app+":/cgi-bin/message/custom/send" ||
		!slices.Equal(v.Cleared.Scopes, []string{send}) {
		t.Fatalf("quota/clear of one API: %+v, want its daily rule and scope alone", v.Cleared)
	}
	if v := verdictOf(t, p, resetRequest(clearQuotaPath, `{"appid":"`+app+`"}`, ""), 200,
		`{"errcode":48006,"errmsg":"forbid to clear quota because of reaching the limit"}`); v.Kind != providers.Quota ||
		!v.Until.Equal(penaltytime.MonthEnd(now, defaultDayGrace)) || v.Scope != "api:"+app+":"+clearQuotaPath {
		t.Errorf("48006: %+v, want the reset API stopped until the month's end", v)
	}
}

// A reset that may be another account's clears nothing here and takes no
// penalty: the shared account of unknown ones, an untagged reset of a
// preset listing several, one tagged with another account, one whose body
// names another, a quota/clear without a tag (its body names no account)
// or of a path no catalog knows, a refused one, and a 48006 of another
// API.
func TestResetOfAnotherAccountClearsNothing(t *testing.T) {
	const app = "wx1234567890abcdef"
	one := testProfile(t, Config{Apps: []App{{AppID: app}}})
	two := testProfile(t, Config{Apps: []App{{AppID: app}, {AppID: "wxsecond"}}})
	unknown := testProfile(t, Config{Apps: []App{{AppID: app}, {AppID: "wxsecond"}}, Unlisted: true})
	for name, c := range map[string]struct {
		p      providers.Profile
		req    *http.Request
		answer string
	}{
		"untagged, several listed": {two, resetRequest(clearQuotaPath, `{"appid":"`+app+`"}`, ""), resetOK},
		"unknown account":          {unknown, resetRequest(clearQuotaPath, `{"appid":"unknown"}`, "unknown"), resetOK},
		"tagged with another":      {two, resetRequest(clearQuotaPath, `{"appid":"`+app+`"}`, "wxsecond"), resetOK},
		"body names another":       {one, resetRequest(clearQuotaPath, `{"appid":"wxother"}`, app), resetOK},
		"untagged, no body":        {one, resetRequest(clearQuotaPath, ``, ""), resetOK},
		"quota/clear untagged":     {one, resetRequest(quotaClearPath, `{"cgi_path":"/cgi-bin/message/custom/send"}`, ""), resetOK},
		"quota/clear unknown path": {one, resetRequest(quotaClearPath, `{"cgi_path":"/cgi-bin/no/such/api"}`, app), resetOK},
		"refused":                  {one, resetRequest(clearQuotaPath, `{"appid":"`+app+`"}`, app), `{"errcode":40013,"errmsg":"invalid appid"}`},
		"48006 untagged, several":  {two, resetRequest(clearQuotaPath, `{"appid":"`+app+`"}`, ""), `{"errcode":48006,"errmsg":"x"}`},
		"48006 of another API":     {one, resetRequest("/cgi-bin/message/custom/send", `{}`, app), `{"errcode":48006,"errmsg":"x"}`},
		"ok of another API":        {one, resetRequest("/cgi-bin/message/custom/send", `{"appid":"`+app+`"}`, app), resetOK},
	} {
		v := verdictOf(t, c.p, c.req, 200, c.answer)
		if v.Cleared != nil || v.Kind == providers.Quota {
			t.Errorf("%s: %+v, want nothing cleared and no penalty", name, v)
		}
	}
}
