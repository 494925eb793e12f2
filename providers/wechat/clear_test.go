package wechat

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/quotaware/throttle/providers"
	"github.com/quotaware/throttle/providers/internal/penaltytime"
)

func resetRequest(path, body string) *http.Request {
	r, err := http.NewRequest(http.MethodPost, "https://api.weixin.qq.com"+path+"?access_token=TOKEN", strings.NewReader(body))
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

// A successful clear_quota of the account ends its 45009 penalties (not a
// 45011, not another account's, not the forced refreshes') and names every
// daily rule of the account; quota/clear names one API's. A reset the
// provider refused, or one naming another account, clears nothing.
func TestResetVerdicts(t *testing.T) {
	const app = "wx1234567890abcdef"
	p := testProfile(t, Config{Apps: []App{{AppID: app}}})
	ok := `{"errcode":0,"errmsg":"ok"}`
	send := "api:" + app + ":/cgi-bin/message/custom/send"

	v := verdictOf(t, p, resetRequest(clearQuotaPath, `{"appid":"`+app+`"}`), 200, ok)
	if v.Kind != providers.OK || v.Cleared == nil {
		t.Fatalf("clear_quota answered ok: %+v, want OK with Cleared", v)
	}
	var keys []string
	for _, r := range v.Cleared.Rules {
		keys = append(keys, r.Key())
	}
	if len(keys) != len(defaultDaily()) || !slices.Contains(keys, "day:"+app+":/cgi-bin/message/custom/send") {
		t.Errorf("cleared rules %v, want the %d daily rules of the account", keys, len(defaultDaily()))
	}
	for _, c := range []struct {
		scope, code string
		want        bool
	}{
		{send, codeDailyQuota, true},
		{send, codeMinuteQuota, false},
		{"api:wxother:/cgi-bin/message/custom/send", codeDailyQuota, false},
		{"api:" + app + ":" + forcedRoute, codeDailyQuota, false},
	} {
		if got := v.Cleared.Lifts(c.scope, c.code); got != c.want {
			t.Errorf("clear_quota lifts %s (%s) = %v, want %v", c.scope, c.code, got, c.want)
		}
	}

	v = verdictOf(t, p, resetRequest(quotaClearPath, `{"cgi_path":"/cgi-bin/message/custom/send"}`), 200, ok)
	if v.Cleared == nil || len(v.Cleared.Rules) != 1 || v.Cleared.Rules[0].Key() != "day:"+app+":/cgi-bin/message/custom/send" {
		t.Fatalf("quota/clear of one API: %+v, want its daily rule alone", v.Cleared)
	}
	if !v.Cleared.Lifts(send, codeDailyQuota) || v.Cleared.Lifts("api:"+app+":/cgi-bin/user/info", codeDailyQuota) {
		t.Error("quota/clear must lift its API's 45009 and no other API's")
	}

	for name, c := range map[string]struct {
		req          *http.Request
		status       int
		body         string
		wantCleared  bool
		wantQuota    bool
		wantMonthEnd bool
	}{
		"another account": {resetRequest(clearQuotaPath, `{"appid":"wxother"}`), 200, ok, false, false, false},
		"no path":         {resetRequest(quotaClearPath, `{}`), 200, ok, false, false, false},
		"refused":         {resetRequest(clearQuotaPath, `{"appid":"`+app+`"}`), 200, `{"errcode":40013,"errmsg":"invalid appid"}`, false, false, false},
		"month used up":   {resetRequest(clearQuotaPath, `{"appid":"`+app+`"}`), 200, `{"errcode":48006,"errmsg":"forbid to clear quota because of reaching the limit"}`, false, true, true},
		"48006 elsewhere": {resetRequest("/cgi-bin/message/custom/send", `{}`), 200, `{"errcode":48006,"errmsg":"x"}`, false, false, false},
		"not a reset":     {resetRequest("/cgi-bin/message/custom/send", `{"appid":"`+app+`"}`), 200, ok, false, false, false},
	} {
		v := verdictOf(t, p, c.req, c.status, c.body)
		if (v.Cleared != nil) != c.wantCleared || (v.Kind == providers.Quota) != c.wantQuota {
			t.Errorf("%s: %+v, want cleared %v, quota %v", name, v, c.wantCleared, c.wantQuota)
		}
		if c.wantMonthEnd && (!v.Until.Equal(penaltytime.MonthEnd(now, defaultDayGrace)) || v.Scope != "api:"+app+":"+clearQuotaPath) {
			t.Errorf("%s: penalty %s until %v, want the reset API's until the month's end", name, v.Scope, v.Until)
		}
	}
}
