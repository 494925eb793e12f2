package dingtalk

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quotaware/throttle/limiter/rule"
	"github.com/quotaware/throttle/providers/internal/penaltytime"
)

func TestConfigValidation(t *testing.T) {
	tests := []struct {
		name  string
		cfg   Config
		field string // "" for valid
	}{
		{"minimal", Config{AppKey: "dingabc"}, ""},
		{"isv with corp", Config{AppKey: "suite", ISV: true, CorpID: "dingcorp"}, ""},
		{"isv with org func", Config{AppKey: "suite", ISV: true, OrgFromRequest: func(*http.Request) string { return "c" }}, ""},
		{"everything off", Config{AppKey: "a", MonthlyQuota: -1, Jitter: -1, MonthGrace: -1, RobotPerMinute: -1, MeteredPaths: []string{}}, ""},
		{"no app key", Config{}, "AppKey"},
		{"app key with space", Config{AppKey: "ding abc"}, "AppKey"},
		{"app key too long", Config{AppKey: strings.Repeat("a", 65)}, "AppKey"},
		{"bad corp", Config{AppKey: "a", CorpID: "x/y"}, "CorpID"},
		{"isv without org", Config{AppKey: "a", ISV: true}, "CorpID"},
		{"bad edition", Config{AppKey: "a", Edition: 7}, "Edition"},
		{"negative rate", Config{AppKey: "a", PerAPIRate: -1}, "PerAPIRate"},
		{"negative isv rate", Config{AppKey: "a", ISVRate: -5}, "ISVRate"},
		{"burst over rate", Config{AppKey: "a", Burst: 21}, "Burst"},
		{"burst over professional rate", Config{AppKey: "a", Edition: Professional, Burst: 41}, "Burst"},
		{"negative burst", Config{AppKey: "a", Burst: -1}, "Burst"},
		{"bad egress", Config{AppKey: "a", Egress: "10.0.0.1:80"}, "Egress"},
		{"negative egress limit", Config{AppKey: "a", EgressLimit: -1}, "EgressLimit"},
		{"tiny egress period", Config{AppKey: "a", EgressPeriod: time.Microsecond}, "EgressPeriod"},
		{"egress burst over limit", Config{AppKey: "a", EgressLimit: 50, EgressBurst: 51}, "EgressBurst"},
		{"month grace a minute", Config{AppKey: "a", MonthGrace: time.Minute}, "MonthGrace"},
		{"jitter a second", Config{AppKey: "a", Jitter: time.Second}, "Jitter"},
		{"negative penalty", Config{AppKey: "a", DefaultPenalty: -1}, "DefaultPenalty"},
		{"negative ban", Config{AppKey: "a", IPBanPenalty: -1}, "IPBanPenalty"},
		{"negative robot penalty", Config{AppKey: "a", RobotPenalty: -1}, "RobotPenalty"},
		{"no hosts", Config{AppKey: "a", Hosts: []string{}}, "Hosts"},
		{"tiny peek", Config{AppKey: "a", PeekLimit: 10}, "PeekLimit"},
		{"relative metered path", Config{AppKey: "a", MeteredPaths: []string{"user/get"}}, "MeteredPaths"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Profile(tt.cfg)
			if tt.field == "" {
				if err != nil {
					t.Fatal(err)
				}
				if err := p.Validate(); err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "Config."+tt.field+" ") {
				t.Fatalf("error %v, want one naming Config.%s", err, tt.field)
			}
		})
	}
}

func TestMustProfilePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("MustProfile accepted an empty AppKey")
		}
	}()
	MustProfile(Config{})
}

func TestMatch(t *testing.T) {
	p := testProfile(t, Config{})
	emu := testProfile(t, Config{Hosts: []string{"127.0.0.1:8080"}})
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
	p := testProfile(t, Config{})
	tests := []struct {
		url    string
		api    string
		rules  []string
		scopes []string
	}{
		{oldURL, "/user/get",
			[]string{"api:dingapp:/user/get", "egress:default", "month:dingapp"},
			[]string{"api:dingapp:/user/get", "app:dingapp", "egress:default", "monthly:dingapp"}},
		{"https://oapi.dingtalk.com/topapi/message/corpconversation/asyncsend_v2?access_token=t", "/topapi/message/corpconversation/asyncsend_v2",
			[]string{"api:dingapp:/topapi/message/corpconversation/asyncsend_v2", "egress:default"},
			[]string{"api:dingapp:/topapi/message/corpconversation/asyncsend_v2", "app:dingapp", "egress:default"}},
		{newURL, "GET /v1.0/contact/users/{unionId}",
			[]string{"api:dingapp:GET /v1.0/contact/users/{unionId}", "egress:default", "month:dingapp"},
			[]string{"api:dingapp:GET /v1.0/contact/users/{unionId}", "app:dingapp", "egress:default", "monthly:dingapp"}},
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
	if api.Limit() != 20 || api.Period() != time.Second+DefaultJitter || strings.Contains(api.String(), "burst") {
		t.Errorf("per-API rule %v", api)
	}
	if egress.Limit() != 10000 || egress.Period() != 20*time.Second+DefaultJitter ||
		!strings.HasSuffix(egress.String(), fmt.Sprintf(", burst %d", 10000/DefaultEgressBurstShare)) {
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
		{Config{Edition: Professional}, 40},
		{Config{Edition: Exclusive}, 60},
		{Config{Edition: Exclusive, PerAPIRate: 25}, 25},
		{Config{ISV: true, CorpID: "c"}, 40},
	} {
		r, _ := testProfile(t, tt.cfg).Route(request("GET", oldURL))
		if r.Rules[0].Limit() != tt.want {
			t.Errorf("%+v: per-API limit %d, want %d", tt.cfg, r.Rules[0].Limit(), tt.want)
		}
	}
	r, _ := testProfile(t, Config{Jitter: -1, MonthlyQuota: -1}).Route(request("GET", oldURL))
	if r.Rules[0].Period() != time.Second || len(r.Rules) != 2 {
		t.Errorf("with jitter and monthly quota off: %v", r.Rules)
	}
}

func TestRouteISV(t *testing.T) {
	type ctxKey struct{}
	p := testProfile(t, Config{AppKey: "suite", ISV: true, CorpID: "fallback",
		OrgFromRequest: func(r *http.Request) string { s, _ := r.Context().Value(ctxKey{}).(string); return s }})
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
	noOrg := testProfile(t, Config{AppKey: "suite", ISV: true, OrgFromRequest: func(*http.Request) string { return "" }})
	if _, err := noOrg.Route(req); err == nil {
		t.Fatal("an ISV request without an org was routed")
	}
}

func TestRouteRobot(t *testing.T) {
	p := testProfile(t, Config{})
	a, _ := p.Route(request("POST", "https://oapi.dingtalk.com/robot/send?access_token=secretA"))
	b, _ := p.Route(request("POST", "https://oapi.dingtalk.com/robot/send?access_token=secretB"))
	if a.Rules[0].Key() == b.Rules[0].Key() || a.Rules[0].Limit() != 20 || a.Rules[0].Period() != time.Minute+DefaultJitter {
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
	p := testProfile(t, Config{AppKey: long, CorpID: long, ISV: true})
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
	p := testProfile(t, Config{})
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
	p := testProfile(b, Config{})
	req := request("GET", oldURL)
	body := `{"errcode":0,"errmsg":"ok","result":{"userid":"u1","name":"张三"}}`
	b.ReportAllocs()
	for b.Loop() {
		routedClassify(p, req, answer(200, json, body))
	}
}
