package dingtalk_test

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/quotaware/throttle/apps"
	"github.com/quotaware/throttle/providers"
	"github.com/quotaware/throttle/providers/dingtalk"
	"github.com/quotaware/throttle/providers/internal/scopekind"
)

func TestAppsRouteByTheRequestsApp(t *testing.T) {
	cfg := dingtalk.Config{Apps: []dingtalk.App{{AppKey: "dingA"}, {AppKey: "dingB", Edition: dingtalk.Professional}, {AppKey: "suiteS", ISV: true}}}
	withDefault := cfg
	withDefault.Default = "dingB"
	cases := []struct {
		name      string
		cfg       dingtalk.Config
		app       *apps.App
		wantScope string // the per-API scope, which is the per-API rule's key
		wantRate  int
		wantErr   string
	}{
		{"learned app", cfg, &apps.App{Provider: "dingtalk", ID: "dingA", Learned: true}, "api:dingA:/user/get", 20, ""},
		{"edition per app", cfg, &apps.App{Provider: "dingtalk", ID: "dingB"}, "api:dingB:/user/get", 40, ""},
		{"suite in an org", cfg, &apps.App{Provider: "dingtalk", ID: "suiteS", Org: "corp7"}, "api:suiteS@corp7:/user/get", 40, ""},
		{"suite without an org", cfg, &apps.App{ID: "suiteS"}, "", 0, "customer org"},
		{"unknown: the shared scope at the lowest rate", cfg, nil, "api:unknown:/user/get", 20, ""},
		{"unknown: the default app", withDefault, nil, "api:dingB:/user/get", 40, ""},
		{"another provider's app is unknown", cfg, &apps.App{Provider: "wechat", ID: "dingA"}, "api:unknown:/user/get", 20, ""},
		{"an unlisted app: a standard app of its own", cfg, &apps.App{Provider: "dingtalk", ID: "dingNew"}, "api:dingNew:/user/get", 20, ""},
		{"an unlisted suite: limited per customer org at an app's rate", cfg, &apps.App{Provider: "dingtalk", ID: "suiteNew", Org: "corp7", Learned: true}, "api:suiteNew@corp7:/user/get", 20, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := dingtalk.MustNew(tc.cfg).Profile()
			ctx := context.Background()
			if tc.app != nil {
				ctx = apps.NewContext(ctx, *tc.app)
			}
			req, _ := http.NewRequestWithContext(ctx, "GET", "https://oapi.dingtalk.com/user/get?access_token=x", nil)
			r, err := p.Route(req)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one about %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.Scopes[0] != tc.wantScope || r.Rules[0].Key() != tc.wantScope {
				t.Fatalf("scope %q, rule key %q; want %q", r.Scopes[0], r.Rules[0].Key(), tc.wantScope)
			}
			if got := r.Rules[0].Limit(); got != tc.wantRate {
				t.Fatalf("per-API limit %d, want %d", got, tc.wantRate)
			}
		})
	}
}

func TestAppsAddWhileRunning(t *testing.T) {
	// Two apps: with one, every request not of another listed app is its.
	a := dingtalk.MustNew(dingtalk.Config{Apps: []dingtalk.App{{AppKey: "dingA"}, {AppKey: "dingB"}}, Unlisted: true})
	p := a.Profile()
	route := func() providers.Route {
		ctx := apps.NewContext(context.Background(), apps.App{ID: "dingC"})
		req, _ := http.NewRequestWithContext(ctx, "GET", "https://api.dingtalk.com/v1.0/contact/users/u1", nil)
		r, err := p.Route(req)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := route(); !strings.Contains(r.Scopes[0], "unknown") {
		t.Fatalf("before Add: %q, want the unknown scope (Unlisted)", r.Scopes[0])
	}
	if err := a.Add(dingtalk.App{AppKey: "dingC", Edition: dingtalk.Exclusive}); err != nil {
		t.Fatal(err)
	}
	if r := route(); !strings.Contains(r.Scopes[0], "dingC") || r.Rules[0].Limit() != 60 {
		t.Fatalf("after Add: %q at %d/s, want dingC at 60/s", r.Scopes[0], r.Rules[0].Limit())
	}
}

// Add replacing the app that requests of no app tag go to (the only app
// listed, or Config.Default) changes their rules too, as it does those of
// the app's tagged requests; without a default, an added app's rate counts
// towards the unknown scope's, the lowest of any app; a Default that Add
// would make an ISV suite without a CorpID is refused, as New refuses it.
func TestAppsAddReplacesTheAppUntaggedRequestsGoTo(t *testing.T) {
	untagged := func(p providers.Profile) providers.Route {
		req, _ := http.NewRequest("GET", "https://api.dingtalk.com/v1.0/contact/users/u1", nil)
		r, err := p.Route(req)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for _, cfg := range []dingtalk.Config{
		{Apps: []dingtalk.App{{AppKey: "dingA"}}},
		{Apps: []dingtalk.App{{AppKey: "dingA"}, {AppKey: "dingB"}}, Default: "dingA"},
	} {
		a := dingtalk.MustNew(cfg)
		p := a.Profile()
		if r := untagged(p); r.Scopes[0] != "api:dingA:/v1.0/contact/users/{unionId}" || r.Rules[0].Limit() != 20 {
			t.Fatalf("%d apps, before Add: %q at %d/s, want dingA's scope at 20/s", len(cfg.Apps), r.Scopes[0], r.Rules[0].Limit())
		}
		if err := a.Add(dingtalk.App{AppKey: "dingA", Edition: dingtalk.Exclusive}); err != nil {
			t.Fatal(err)
		}
		if r := untagged(p); r.Rules[0].Limit() != 60 {
			t.Errorf("%d apps, after Add: %q at %d/s, want 60/s", len(cfg.Apps), r.Scopes[0], r.Rules[0].Limit())
		}
	}
	// No default app: the unknown scope runs at the lowest rate of the
	// apps listed, an app added since included.
	a := dingtalk.MustNew(dingtalk.Config{Apps: []dingtalk.App{{AppKey: "dingA"}, {AppKey: "dingB", Edition: dingtalk.Professional}}})
	p := a.Profile()
	if err := a.Add(dingtalk.App{AppKey: "dingC", PerAPIRate: 8}); err != nil {
		t.Fatal(err)
	}
	if r := untagged(p); !strings.Contains(r.Scopes[0], "unknown") || r.Rules[0].Limit() != 8 {
		t.Errorf("no default, after adding an app of 8/s: %q at %d/s, want the unknown scope at 8/s", r.Scopes[0], r.Rules[0].Limit())
	}

	a = dingtalk.MustNew(dingtalk.Config{Apps: []dingtalk.App{{AppKey: "dingA"}, {AppKey: "dingB"}}, Default: "dingA"})
	if err := a.Add(dingtalk.App{AppKey: "dingA", ISV: true}); err == nil || !strings.Contains(err.Error(), `Config.Default "dingA" is an ISV suite`) {
		t.Errorf("Add made the Default an ISV suite without a CorpID: err = %v", err)
	}
}

func TestAppsConfigErrorsNameTheField(t *testing.T) {
	cases := []struct {
		cfg  dingtalk.Config
		want string
	}{
		{dingtalk.Config{Apps: []dingtalk.App{{AppKey: "a"}, {AppKey: ""}}}, "Config.Apps[1]: App.AppKey"},
		{dingtalk.Config{Apps: []dingtalk.App{{AppKey: "a"}}, Default: "b"}, "Config.Default"},
		{dingtalk.Config{Apps: []dingtalk.App{{AppKey: "s", ISV: true}}, Default: "s"}, "Config.Default \"s\" is an ISV suite"},
		{dingtalk.Config{Apps: []dingtalk.App{{AppKey: "a"}}, EgressLimit: -1}, "Config.EgressLimit"},
		{dingtalk.Config{Apps: []dingtalk.App{{AppKey: "a", MonthlyQuota: -1}}}, "App.MonthlyQuota must not be negative (NoMonthlyQuota"},
		{dingtalk.Config{Apps: []dingtalk.App{{AppKey: "a"}}, Jitter: -1}, "Config.Jitter must not be negative (NoJitter"},
		{dingtalk.Config{Apps: []dingtalk.App{{AppKey: "a"}}, RobotPerMinute: -1}, "Config.RobotPerMinute must not be negative (NoRobotLimit"},
		{dingtalk.Config{Apps: []dingtalk.App{{AppKey: "a"}}, MonthGrace: -1}, "Config.MonthGrace must not be negative (NoMonthGrace"},
	}
	for _, tc := range cases {
		if _, err := dingtalk.New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("err = %v, want one naming %q", err, tc.want)
		}
	}
}

// An ISV suite's metered calls count against each customer org's own
// monthly quota, and a 90020 scope names that org only.
func TestISVMonthlyQuotaPerOrg(t *testing.T) {
	p := dingtalk.MustNew(dingtalk.Config{Apps: []dingtalk.App{{AppKey: "suiteS", ISV: true}}}).Profile()
	keys := map[string]bool{}
	for _, org := range []string{"corp1", "corp2"} {
		ctx := apps.NewContext(context.Background(), apps.App{ID: "suiteS", Org: org})
		req, _ := http.NewRequestWithContext(ctx, "GET", "https://oapi.dingtalk.com/user/get?access_token=x", nil)
		r, err := p.Route(req)
		if err != nil {
			t.Fatal(err)
		}
		month := r.Rules[len(r.Rules)-1]
		if !strings.Contains(month.Key(), org) || !strings.Contains(r.Scope(scopekind.Monthly), org) {
			t.Fatalf("%s: monthly rule %q, scope %q; want both the org's", org, month.Key(), r.Scope(scopekind.Monthly))
		}
		keys[month.Key()] = true
	}
	if len(keys) != 2 {
		t.Fatalf("the orgs share a monthly rule: %v", keys)
	}
}

// An ISV suite nobody listed, learned from its tokens in two customer orgs:
// each org has its own per-API rule, monthly quota and penalty scopes, as
// a listed suite's would (it was limited as one internal app: every org
// shared one rate and one month, and one org's 90020 stopped them all).
func TestUnlistedSuiteIsLimitedPerOrg(t *testing.T) {
	p := dingtalk.MustNew(dingtalk.Config{Apps: []dingtalk.App{{AppKey: "dingA"}}}).Profile()
	route := func(org string) (providers.Route, *http.Request) { return routeAs(t, p, "suiteX", org) }
	a, reqA := route("orgA")
	b, _ := route("orgB")
	keys := func(r providers.Route) string {
		var ks []string
		for _, rl := range r.Rules {
			ks = append(ks, rl.Key())
		}
		return strings.Join(ks, " ")
	}
	for _, want := range []string{"api:suiteX@orgA:/user/get", "month:orgA"} {
		if !strings.Contains(keys(a), want) || strings.Contains(keys(b), want) {
			t.Errorf("orgA's rules %q, orgB's %q: want %s in orgA's alone", keys(a), keys(b), want)
		}
	}
	if a.Rules[0].Limit() != 20 {
		t.Errorf("per-API limit %d, want an internal app's 20", a.Rules[0].Limit())
	}
	// orgA's monthly quota is used up: only orgA's metered APIs stop.
	resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(`{"errcode":90020,"errmsg":"api count limit for org"}`)), ContentLength: -1, Request: reqA}
	v := p.Classify(reqA, resp, &a)
	if v.Kind != providers.Quota || !slices.Contains(a.Scopes, v.Scope) || slices.Contains(b.Scopes, v.Scope) {
		t.Fatalf("90020 in orgA: %+v; want a quota on a scope of orgA's alone (orgA %q, orgB %q)", v, a.Scopes, b.Scopes)
	}
}

// An API is a URL path, as DingTalk counts it: a path's methods share its
// per-API rule and its penalties (limited apart, POST and PUT of
// /v1.0/attendance/groups reached twice the path's 20/s), and so do two
// templates of one path that name its parameters differently.
func TestMethodsOfOnePathShareItsLimit(t *testing.T) {
	p := dingtalk.MustNew(dingtalk.Config{Apps: []dingtalk.App{{AppKey: "dingA"}}}).Profile()
	for _, tc := range []struct{ path, want string }{
		{"/v1.0/attendance/groups", "api:dingA:/v1.0/attendance/groups"},
		{"/v1.0/doc/suites/documents/d1/blocks/b1", "api:dingA:/v1.0/doc/suites/documents/{docKey}/blocks/{blockId}"},
	} {
		known := 0
		for _, method := range []string{"POST", "PUT", "DELETE"} {
			req, _ := http.NewRequest(method, "https://api.dingtalk.com"+tc.path, nil)
			r, err := p.Route(req)
			if err != nil {
				t.Fatal(err)
			}
			if r.Uncatalogued {
				continue // a method the path has not
			}
			known++
			if !strings.HasPrefix(r.API, method+" ") {
				t.Fatalf("%s %s: API %q, want the method named in telemetry", method, tc.path, r.API)
			}
			if got := r.Rules[0].Key() + " " + r.Scope(scopekind.API); got != tc.want+" "+tc.want {
				t.Errorf("%s %s: per-API rule and scope %q, want the path's, %q", method, tc.path, got, tc.want)
			}
		}
		if known < 2 {
			t.Errorf("%s: %d catalogued methods, want two to compare", tc.path, known)
		}
	}
}

// An unlisted app's requests are routed by whether their own token named
// an org, not by the first token this replica saw: replicas that learned
// the app in different orders still agree on every request's keys.
func TestUnlistedAppRoutedAlikeWhateverCameFirst(t *testing.T) {
	key := func(p providers.Profile, org string) string {
		r, _ := routeAs(t, p, "dingX", org)
		return r.Rules[0].Key()
	}
	cfg := dingtalk.Config{Apps: []dingtalk.App{{AppKey: "dingA"}}}
	noOrgFirst, orgFirst := dingtalk.MustNew(cfg).Profile(), dingtalk.MustNew(cfg).Profile()
	a1, a2 := key(noOrgFirst, ""), key(noOrgFirst, "corp1")
	b2, b1 := key(orgFirst, "corp1"), key(orgFirst, "")
	if a1 != b1 || a2 != b2 || a1 != "api:dingX:/user/get" || a2 != "api:dingX@corp1:/user/get" {
		t.Fatalf("no org then org: %q, %q; org then no org: %q, %q; want the app's key without an org, the org's with one", a1, a2, b2, b1)
	}
}

// The path is read as sent: an ID holding an escaped "/" is one segment,
// as DingTalk reads it, not two that match no API.
func TestEscapedSlashInAnIDIsOneSegment(t *testing.T) {
	p := dingtalk.MustNew(dingtalk.Config{Apps: []dingtalk.App{{AppKey: "dingA"}}}).Profile()
	req, _ := http.NewRequest("GET", "https://api.dingtalk.com/v1.0/contact/users/a%2Fb", nil)
	r, err := p.Route(req)
	if err != nil {
		t.Fatal(err)
	}
	if r.API != "GET /v1.0/contact/users/{unionId}" {
		t.Fatalf("API %q, want the user API", r.API)
	}
}

// routeAs routes a /user/get call of the learned app id (in org, when not
// empty) through p.
func routeAs(t *testing.T, p providers.Profile, id, org string) (providers.Route, *http.Request) {
	t.Helper()
	ctx := apps.NewContext(context.Background(), apps.App{Provider: "dingtalk", ID: id, Org: org, Learned: true})
	req, _ := http.NewRequestWithContext(ctx, "GET", "https://oapi.dingtalk.com/user/get?access_token=x", nil)
	r, err := p.Route(req)
	if err != nil {
		t.Fatal(err)
	}
	return r, req
}
