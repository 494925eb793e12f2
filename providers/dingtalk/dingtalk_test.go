package dingtalk

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quotaware/throttle/apps"
	"github.com/quotaware/throttle/limiter/rule"
	"github.com/quotaware/throttle/providers/internal/penaltytime"
)

func TestConfigValidation(t *testing.T) {
	tests := []struct {
		name  string
		cfg   Config
		field string // "" for valid
	}{
		{"minimal", Config{Apps: []App{{AppKey: "dingabc"}}}, ""},
		{"isv with corp", Config{Apps: []App{{AppKey: "suite", ISV: true, CorpID: "dingcorp"}}}, ""},
		{"isv with org func", Config{Apps: []App{{AppKey: "suite", ISV: true, OrgFromRequest: func(*http.Request) string { return "c" }}}}, ""},
		{"everything off", Config{NoJitter: true, NoMonthGrace: true, NoRobotLimit: true, Apps: []App{{AppKey: "a", NoMonthlyQuota: true, MeteredPaths: []string{}}}}, ""},
		{"no app key", Config{Apps: []App{{}}}, "AppKey"},
		{"app key with space", Config{Apps: []App{{AppKey: "ding abc"}}}, "AppKey"},
		{"app key too long", Config{Apps: []App{{AppKey: strings.Repeat("a", 65)}}}, "AppKey"},
		{"bad corp", Config{Apps: []App{{AppKey: "a", CorpID: "x/y"}}}, "CorpID"},
		// An ISV suite's orgs are learned from its tokens: no CorpID needed.
		{"isv without org", Config{Apps: []App{{AppKey: "a", ISV: true}}}, ""},
		{"bad edition", Config{Apps: []App{{AppKey: "a", Edition: 7}}}, "Edition"},
		{"negative rate", Config{Apps: []App{{AppKey: "a", PerAPIRate: -1}}}, "PerAPIRate"},
		{"negative isv rate", Config{Apps: []App{{AppKey: "a", ISV: true, ISVRate: -5}}}, "ISVRate"},
		// Fields that contradict another, or that the app's kind ignores.
		{"edition and another rate", Config{Apps: []App{{AppKey: "a", Edition: Exclusive, PerAPIRate: 25}}}, "PerAPIRate"},
		{"isv with a per-app rate", Config{Apps: []App{{AppKey: "a", ISV: true, CorpID: "c", PerAPIRate: 30}}}, "PerAPIRate"},
		{"isv with an edition", Config{Apps: []App{{AppKey: "a", ISV: true, CorpID: "c", Edition: Professional}}}, "Edition"},
		{"isv rate on an internal app", Config{Apps: []App{{AppKey: "a", ISVRate: 30}}}, "ISVRate"},
		{"org func on an internal app", Config{Apps: []App{{AppKey: "a", OrgFromRequest: func(*http.Request) string { return "c" }}}}, "OrgFromRequest"},
		{"monthly quota counting nothing", Config{Apps: []App{{AppKey: "a", MonthlyQuota: 9000, MeteredPaths: []string{}}}}, "MeteredPaths"},
		{"burst over rate", Config{Apps: []App{{AppKey: "a", Burst: 21}}}, "Burst"},
		{"burst over professional rate", Config{Apps: []App{{AppKey: "a", Edition: Professional, Burst: 41}}}, "Burst"},
		{"negative burst", Config{Apps: []App{{AppKey: "a", Burst: -1}}}, "Burst"},
		{"bad egress", Config{Egress: "10.0.0.1:80", Apps: []App{{AppKey: "a"}}}, "Egress"},
		{"negative egress limit", Config{EgressLimit: -1, Apps: []App{{AppKey: "a"}}}, "EgressLimit"},
		{"tiny egress period", Config{EgressPeriod: time.Microsecond, Apps: []App{{AppKey: "a"}}}, "EgressPeriod"},
		// rule.New's error before, naming neither the preset nor the field.
		{"huge egress period", Config{EgressPeriod: 20 * 365 * 24 * time.Hour, Apps: []App{{AppKey: "a"}}}, "EgressPeriod must be within"},
		{"huge robot window", Config{RobotWindow: 20 * 365 * 24 * time.Hour, Apps: []App{{AppKey: "a"}}}, "RobotWindow must be within"},
		{"huge peek limit", Config{PeekLimit: 1 << 30, Apps: []App{{AppKey: "a"}}}, "PeekLimit must be within"},
		{"egress burst over limit", Config{EgressLimit: 50, EgressBurst: 51, Apps: []App{{AppKey: "a"}}}, "EgressBurst"},
		{"month grace a minute", Config{MonthGrace: time.Minute, Apps: []App{{AppKey: "a"}}}, "MonthGrace"},
		{"jitter a second", Config{Jitter: time.Second, Apps: []App{{AppKey: "a"}}}, "Jitter"},
		{"negative penalty", Config{DefaultPenalty: -1, Apps: []App{{AppKey: "a"}}}, "DefaultPenalty"},
		{"negative ban", Config{IPBanPenalty: -1, Apps: []App{{AppKey: "a"}}}, "IPBanPenalty"},
		{"empty escalation", Config{Escalation: []time.Duration{}, Apps: []App{{AppKey: "a"}}}, "Escalation"},
		{"zero escalation step", Config{Escalation: []time.Duration{time.Second, 0}, Apps: []App{{AppKey: "a"}}}, "Escalation[1]"},
		{"escalation step over an hour", Config{Escalation: []time.Duration{2 * time.Hour}, Apps: []App{{AppKey: "a"}}}, "Escalation[0]"},
		{"negative escalation window", Config{EscalationWindow: -1, Apps: []App{{AppKey: "a"}}}, "EscalationWindow"},
		{"negative robot penalty", Config{RobotPenalty: -1, Apps: []App{{AppKey: "a"}}}, "RobotPenalty"},
		{"no hosts", Config{Hosts: []string{}, Apps: []App{{AppKey: "a"}}}, "Hosts"},
		{"tiny peek", Config{PeekLimit: 10, Apps: []App{{AppKey: "a"}}}, "PeekLimit"},
		{"relative metered path", Config{Apps: []App{{AppKey: "a", MeteredPaths: []string{"user/get"}}}}, "MeteredPaths"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := New(tt.cfg)
			if tt.field == "" {
				if err != nil {
					t.Fatal(err)
				}
				if prof := p.Profile(); prof.Validate() != nil {
					t.Fatal(prof.Validate())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "."+tt.field+" ") {
				t.Fatalf("error %v, want one naming Config.%s", err, tt.field)
			}
		})
	}
}

func TestMustProfilePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("MustNew accepted an empty AppKey")
		}
	}()
	MustNew(Config{Apps: []App{{}}}).Profile()
}

func TestMatch(t *testing.T) {
	p := testProfile(t, Config{Apps: []App{{}}})
	emu := testProfile(t, Config{Hosts: []string{"127.0.0.1:8080"}, Apps: []App{{}}})
	tests := []struct {
		url    string
		p, emu bool
	}{
		{"https://oapi.dingtalk.com/user/get", true, false},
		{"https://api.dingtalk.com/v1.0/contact/users/x", true, false},
		{"https://API.DingTalk.com:443/v1.0/x", true, false},
		{"https://open.feishu.cn/open-apis/x", false, false},
		{"https://oapi.dingtalk.com.evil.example/x", false, false},
		{"http://127.0.0.1:8080/user/get", false, true},
		{"http://127.0.0.1:8081/user/get", false, false},
	}
	for _, tt := range tests {
		req := request("GET", tt.url)
		if got := p.Match(req); got != tt.p {
			t.Errorf("default Match(%s) = %v", tt.url, got)
		}
		if got := emu.Match(req); got != tt.emu {
			t.Errorf("emulator Match(%s) = %v", tt.url, got)
		}
	}
}

func TestRoute(t *testing.T) {
	p := testProfile(t, Config{Apps: []App{{}}})
	tests := []struct {
		url    string
		api    string
		rules  []string
		scopes []string
	}{
		{oldURL, "/user/get",
			[]string{"api:dingapp:/user/get", "egress:default", "month:dingapp"},
			[]string{"api:dingapp:/user/get", "callers:/user/get", "app:dingapp", "egress:default", "monthly:dingapp"}},
		{"https://oapi.dingtalk.com/topapi/message/corpconversation/asyncsend_v2?access_token=t", "/topapi/message/corpconversation/asyncsend_v2",
			[]string{"api:dingapp:/topapi/message/corpconversation/asyncsend_v2", "egress:default"},
			[]string{"api:dingapp:/topapi/message/corpconversation/asyncsend_v2", "callers:/topapi/message/corpconversation/asyncsend_v2", "app:dingapp", "egress:default"}},
		{newURL, "GET /v1.0/contact/users/{unionId}",
			[]string{"api:dingapp:/v1.0/contact/users/{unionId}", "egress:default", "month:dingapp"},
			[]string{"api:dingapp:/v1.0/contact/users/{unionId}", "callers:/v1.0/contact/users/{unionId}", "app:dingapp", "egress:default", "monthly:dingapp"}},
	}
	for _, tt := range tests {
		r, err := p.Route(request("GET", tt.url))
		if err != nil {
			t.Fatal(err)
		}
		if r.API != tt.api || strings.Join(ruleKeys(r.Rules), ",") != strings.Join(tt.rules, ",") || strings.Join(r.Scopes, ",") != strings.Join(tt.scopes, ",") {
			t.Errorf("Route(%s) = %s %q %q, want %s %q %q", tt.url, r.API, ruleKeys(r.Rules), r.Scopes, tt.api, tt.rules, tt.scopes)
		}
	}
	r, _ := p.Route(request("GET", oldURL))
	api, egress, month := r.Rules[0], r.Rules[1], r.Rules[2]
	if api.Limit() != 20 || api.Period() != time.Second+defaultJitter || strings.Contains(api.String(), "burst") {
		t.Errorf("per-API rule %v", api)
	}
	if egress.Limit() != 10000 || egress.Period() != 20*time.Second+defaultJitter ||
		!strings.HasSuffix(egress.String(), fmt.Sprintf(", burst %d", 10000/defaultEgressBurstShare)) {
		t.Errorf("egress rule %v", egress)
	}
	if month.Limit() != 5000 || month.Unit() != rule.Month ||
		!strings.HasSuffix(month.String(), "("+penaltytime.Beijing().String()+")") {
		t.Errorf("monthly rule %v", month)
	}
}

func TestRouteEdition(t *testing.T) {
	for _, tt := range []struct {
		cfg  Config
		want int
	}{
		{Config{Apps: []App{{Edition: Professional}}}, 40},
		{Config{Apps: []App{{Edition: Exclusive}}}, 60},
		{Config{Apps: []App{{PerAPIRate: 25}}}, 25},
		{Config{Apps: []App{{Edition: Exclusive, PerAPIRate: 60}}}, 60}, // the same, said twice
		{Config{Apps: []App{{ISV: true, CorpID: "c"}}}, 40},
	} {
		r, _ := testProfile(t, tt.cfg).Route(request("GET", oldURL))
		if r.Rules[0].Limit() != tt.want {
			t.Errorf("%+v: per-API limit %d, want %d", tt.cfg, r.Rules[0].Limit(), tt.want)
		}
	}
	for _, cfg := range []Config{
		{NoJitter: true, Apps: []App{{NoMonthlyQuota: true}}},
		// Values given and turned off: off wins.
		{Jitter: 100 * time.Millisecond, NoJitter: true, Apps: []App{{MonthlyQuota: 500, NoMonthlyQuota: true}}},
	} {
		r, _ := testProfile(t, cfg).Route(request("GET", oldURL))
		if r.Rules[0].Period() != time.Second || len(r.Rules) != 2 {
			t.Errorf("with jitter and monthly quota off (%+v): %v", cfg, r.Rules)
		}
	}
}

func TestRouteISV(t *testing.T) {
	type ctxKey struct{}
	p := testProfile(t, Config{Apps: []App{{AppKey: "suite", ISV: true, CorpID: "fallback", OrgFromRequest: func(r *http.Request) string { s, _ := r.Context().Value(ctxKey{}).(string); return s }}}})
	req := request("GET", oldURL)
	r1, _ := p.Route(req.WithContext(context.WithValue(req.Context(), ctxKey{}, "corpA")))
	r2, _ := p.Route(req.WithContext(context.WithValue(req.Context(), ctxKey{}, "corpB")))
	r3, _ := p.Route(req)
	if r1.Rules[0].Key() != "api:suite@corpA:/user/get" || r2.Rules[0].Key() != "api:suite@corpB:/user/get" || r3.Rules[0].Key() != "api:suite@fallback:/user/get" {
		t.Fatalf("ISV rule keys %s %s %s", r1.Rules[0].Key(), r2.Rules[0].Key(), r3.Rules[0].Key())
	}
	if !contains(r1.Scopes, "org:suite@corpA") {
		t.Fatalf("ISV scopes %q lack the org", r1.Scopes)
	}
	// The suite's request naming no org fails (one of no app goes to the
	// unknown scope: TestLoneISVSuiteIsNoDefault).
	noOrg := testProfile(t, Config{Apps: []App{{AppKey: "suite", ISV: true, OrgFromRequest: func(*http.Request) string { return "" }}}})
	if _, err := noOrg.Route(req.WithContext(apps.NewContext(req.Context(), apps.App{ID: "suite"}))); err == nil {
		t.Fatal("an ISV request without an org was routed")
	}
}

func TestRouteRobot(t *testing.T) {
	p := testProfile(t, Config{Apps: []App{{}}})
	a, _ := p.Route(request("POST", "https://oapi.dingtalk.com/robot/send?access_token=secretA"))
	b, _ := p.Route(request("POST", "https://oapi.dingtalk.com/robot/send?access_token=secretB"))
	if a.Rules[0].Key() == b.Rules[0].Key() || a.Rules[0].Limit() != 20 || a.Rules[0].Period() != time.Minute+defaultJitter {
		t.Fatalf("robot rules %v and %v", a.Rules[0], b.Rules[0])
	}
	for _, s := range append(append([]string{}, a.Scopes...), ruleKeys(a.Rules)...) {
		if strings.Contains(s, "secret") {
			t.Fatalf("robot token leaked into %q", s)
		}
	}
}

// Keys stay within rule.MaxKeyLen and distinct whatever the path and IDs.
func TestRouteKeysBounded(t *testing.T) {
	long := strings.Repeat("x", 64)
	p := testProfile(t, Config{Apps: []App{{AppKey: long, CorpID: long, ISV: true}}})
	seen := map[string]string{}
	paths := []string{
		"/" + strings.Repeat("segment/", 40) + "a",
		"/" + strings.Repeat("segment/", 40) + "b",
		"/" + strings.Repeat("segmen/", 40),
		"/v1.0/contact/users/manager4220",
		"/v1.0/contact/users/manager4220/departments",
	}
	for _, path := range paths {
		req := request("GET", "https://api.dingtalk.com/")
		req.URL.Path = path
		r, err := p.Route(req)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range append(ruleKeys(r.Rules), r.Scopes...) {
			if len(k) > rule.MaxKeyLen {
				t.Fatalf("key of %d bytes: %q", len(k), k)
			}
		}
		k := r.Rules[0].Key()
		if prev, ok := seen[k]; ok && prev != r.API {
			t.Fatalf("%q and %q share the key %q", prev, r.API, k)
		}
		seen[k] = r.API
	}
	if len(seen) != 3 { // the long paths are one uncatalogued API
		t.Fatalf("keys %v", seen)
	}
}

// A cached route costs no allocation for the old API's paths.
func TestRouteAllocs(t *testing.T) {
	p := testProfile(t, Config{Apps: []App{{}}})
	req := request("GET", topURL)
	if _, err := p.Route(req); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = p.Route(req) }); n != 0 {
		t.Fatalf("Route allocated %v times", n)
	}
}

func ruleKeys(rules []rule.Rule) []string {
	out := make([]string, len(rules))
	for i, r := range rules {
		out[i] = r.Key()
	}
	return out
}

func BenchmarkClassifyOK(b *testing.B) {
	p := testProfile(b, Config{Apps: []App{{}}})
	req := request("GET", oldURL)
	body := `{"errcode":0,"errmsg":"ok","result":{"userid":"u1","name":"张三"}}`
	b.ReportAllocs()
	for b.Loop() {
		routedClassify(p, req, answer(200, json, body))
	}
}
