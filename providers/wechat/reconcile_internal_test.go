package wechat

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/quotaware/throttle/apps"
	"github.com/quotaware/throttle/limiter/rule"
	"github.com/quotaware/throttle/providers"
)

// A reconciled limit raises or lowers this account's daily rule (same key),
// ignores other accounts' and Feishu-style limits, and lapses at Until;
// with Reconcile off, none applies (one in Redis then is stale or planted,
// and raised the configured Daily for up to a month).
func TestReconciledLimitAppliesToItsAccount(t *testing.T) {
	now := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	const api = "/cgi-bin/message/custom/send"
	off, err := profileOf(settings{Config: Config{Clock: func() time.Time { return now }}, App: App{AppID: "wxa", Daily: map[string]int{api: 100}}})
	if err != nil {
		t.Fatal(err)
	}
	if off.Lower(providers.Learned{API: api, App: "wxa", Window: learnedDaily, Limit: 250, Until: now.Add(time.Hour)}) {
		t.Fatal("a reconciled limit applied with Reconcile off")
	}
	pr, err := profileOf(settings{Config: Config{Clock: func() time.Time { return now }, Reconcile: true}, App: App{AppID: "wxa", Daily: map[string]int{api: 100}}})
	if err != nil {
		t.Fatal(err)
	}
	limit := func() int {
		req := httptest.NewRequest(http.MethodPost, "https://api.weixin.qq.com"+api, nil)
		r, _ := pr.Route(req)
		return r.Rules[dailyIndex(r.Rules)].Limit()
	}
	until := now.Add(time.Hour)
	for _, l := range []providers.Learned{
		{API: api, App: "wxb", Window: learnedDaily, Limit: 7, Until: until}, // another account
		{API: api, Window: learnedDaily, Limit: 7, Until: until},             // no account
		{API: api, App: "wxa", Window: "s", Limit: 7, Until: until},          // not a day
	} {
		if pr.Lower(l) || limit() != 100 {
			t.Fatalf("%+v applied: limit %d", l, limit())
		}
	}
	if !pr.Lower(providers.Learned{API: api, App: "wxa", Window: learnedDaily, Limit: 250, Until: until}) || limit() != 250 {
		t.Fatalf("raise to 250: limit %d", limit())
	}
	if pr.Lower(providers.Learned{API: api, App: "wxa", Window: learnedDaily, Limit: 250, Until: until}) {
		t.Fatal("the same limit again reported a change")
	}
	// A reading taken before the one in force (it lapses sooner), applied
	// after it, changes nothing.
	if pr.Lower(providers.Learned{API: api, App: "wxa", Window: learnedDaily, Limit: 180, Until: until.Add(-time.Minute)}) || limit() != 250 {
		t.Fatalf("an older reading applied: limit %d, want the newer 250", limit())
	}
	now = until
	if limit() != 100 {
		t.Fatalf("after Until: limit %d, want the configured 100", limit())
	}
}

// readQuota reads the documented answer and refuses errcodes and garbage
// with errQuotaAnswer.
func TestReadQuota(t *testing.T) {
	for body, want := range map[string]int{
		`{"errcode":0,"errmsg":"ok","quota":{"daily_limit":300,"used":120,"remain":180}}`: 300,
		`{"errcode":76021,"errmsg":"cgi_path not found rid: x"}`:                          -1,
		`{"errcode":0,"quota":{"used":1}}`:                                                -1,
		`not json`:                                                                        -1,
	} {
		r, err := readQuota(&http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader(body))})
		if want < 0 && err == nil || want > 0 && (err != nil || r.Limit != want || r.Used != 120) {
			t.Errorf("%s: %+v, %v", body, r, err)
		}
	}
}

// A quota is read with a request's token only when the token is that
// account's: tagged with it, or the preset lists that account alone. An
// untagged request charged to the Default account of several may carry
// another account's token.
func TestQuotaTargetNeedsTheAccountsToken(t *testing.T) {
	const api = "/cgi-bin/message/custom/send"
	day := rule.Must(rule.NewCalendar("day:wxa:"+api, 100, rule.Day, time.UTC))
	route := &providers.Route{API: api, Rules: []rule.Rule{day}}
	req := httptest.NewRequest(http.MethodPost, "https://api.weixin.qq.com"+api+"?access_token=tok-of-someone", nil)
	tagged := func(id string) *http.Request {
		return req.WithContext(apps.NewContext(req.Context(), apps.App{Provider: Name, ID: id}))
	}
	for _, c := range []struct {
		name   string
		req    *http.Request
		single bool
		want   bool
	}{
		{"untagged, one account listed", req, true, true},
		{"untagged, several listed", req, false, false},
		{"tagged with the account", tagged("wxa"), false, true},
		{"tagged with another", tagged("wxb"), true, false},
	} {
		if _, ok := quotaTarget(c.req, route, c.single); ok != c.want {
			t.Errorf("%s: target %v, want %v", c.name, ok, c.want)
		}
	}
}

// Readings applied out of order end on the newest, on the profile in use
// and on one an Add builds later from what the app set kept: an older
// reading read again (from Redis, by another replica's Transport) changes
// neither.
func TestReconciledReadingsOutOfOrder(t *testing.T) {
	now := time.Date(2026, 1, 5, 12, 0, 0, 0, time.UTC)
	const api = "/cgi-bin/message/custom/send"
	app := App{AppID: "wxa", Daily: map[string]int{api: 100}}
	p, err := New(Config{Clock: func() time.Time { return now }, Reconcile: true, Apps: []App{app}})
	if err != nil {
		t.Fatal(err)
	}
	prof := p.Profile()
	limit := func() int {
		req := httptest.NewRequest(http.MethodPost, "https://api.weixin.qq.com"+api, nil)
		req = req.WithContext(apps.NewContext(req.Context(), apps.App{Provider: Name, ID: "wxa"}))
		r, err := prof.Route(req)
		if err != nil {
			t.Fatal(err)
		}
		return r.Rules[dailyIndex(r.Rules)].Limit()
	}
	older := providers.Learned{API: api, App: "wxa", Window: learnedDaily, Limit: 250, Until: now.Add(time.Hour)}
	newer := providers.Learned{API: api, App: "wxa", Window: learnedDaily, Limit: 300, Until: now.Add(time.Hour + 15*time.Minute)}
	prof.Lower(older)
	prof.Lower(newer)
	prof.Lower(older)
	if got := limit(); got != 300 {
		t.Fatalf("in use: %d a day, want the newer reading's 300", got)
	}
	if err := p.Add(app); err != nil {
		t.Fatal(err)
	}
	if got := limit(); got != 300 {
		t.Errorf("built by Add: %d a day, want the newer reading's 300", got)
	}
}

// An account whose requests reach WeChat through a gateway by URL, naming
// api.weixin.qq.com in their Host header, is read the same way: the reading
// to the gateway with that Host (without it, the gateway could not forward
// it and every reading failed).
func TestQuotaReadingTakesTheRequestsGateway(t *testing.T) {
	const api = "/cgi-bin/message/custom/send"
	day := rule.Must(rule.NewCalendar("day:wxa:"+api, 100, rule.Day, time.UTC))
	route := &providers.Route{API: api, Rules: []rule.Rule{day}}
	req := httptest.NewRequest(http.MethodPost, "http://10.0.0.9:8080"+api+"?access_token=tok", nil)
	req.Host = "api.weixin.qq.com"
	target, ok := quotaTarget(req, route, true)
	if !ok || target.Origin != "http://10.0.0.9:8080" || target.Host != "api.weixin.qq.com" {
		t.Fatalf("target %+v, %v; want the gateway's origin and the provider's Host", target, ok)
	}
	q, err := quotaQuery(context.Background(), target)
	if err != nil || q.URL.Host != "10.0.0.9:8080" || q.Host != "api.weixin.qq.com" {
		t.Fatalf("reading to %s with Host %q (%v), want the gateway with api.weixin.qq.com", q.URL.Host, q.Host, err)
	}
	direct := httptest.NewRequest(http.MethodPost, "https://api.weixin.qq.com"+api+"?access_token=tok", nil)
	if target, _ := quotaTarget(direct, route, true); target.Host != "" {
		t.Errorf("a direct request's target names Host %q, want none", target.Host)
	}
}
