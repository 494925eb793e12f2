package feishu

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/quotaware/throttle/apps"
	"github.com/quotaware/throttle/providers"
	"github.com/quotaware/throttle/providers/internal/scopekind"
)

// Without Jitter the preset asks the Transport for a measured allowance;
// a rebuild widens every rule by it, keeps the levels learned before it
// (built again with the new allowance) and the chats of the messages seen,
// and an app added after it routes by its own rules on the rebuilt profile.
func TestRebuildForAnAllowanceKeepsWhatWasLearned(t *testing.T) {
	const api = "GET /open-apis/contact/v3/users/:user_id"
	now := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	for _, c := range []Config{{Jitter: 10 * time.Millisecond}, {NoJitter: true}} {
		c.Apps = []App{{AppID: "cli_a"}}
		p := MustNew(c).Profile()
		if p.Headroom != nil {
			t.Errorf("Jitter %v NoJitter %v: a measured allowance asked for", c.Jitter, c.NoJitter)
		}
		// The Jitter chosen bounds a late wake (providers.Profile.Jitter).
		if p.Jitter != c.Jitter {
			t.Errorf("Jitter %v NoJitter %v: Profile.Jitter %v, want %v", c.Jitter, c.NoJitter, p.Jitter, c.Jitter)
		}
	}
	set := MustNew(Config{Clock: clock, Apps: []App{{AppID: "cli_a", APIs: map[string]int{api: 4}}, {AppID: "cli_b"}}})
	prof := set.Profile()
	if prof.Headroom == nil || prof.Headroom.Initial != defaultJitter {
		t.Fatalf("Headroom %+v, want one starting at %v", prof.Headroom, defaultJitter)
	}
	req := func(app string) *http.Request {
		r := httptest.NewRequest(http.MethodGet, "https://open.feishu.cn/open-apis/contact/v3/users/ou_1", nil)
		return r.WithContext(apps.NewContext(r.Context(), apps.App{ID: app}))
	}
	route := func(p providers.Profile, app string) providers.Route {
		t.Helper()
		rt, err := p.Route(req(app))
		if err != nil || len(rt.Rules) == 0 {
			t.Fatalf("route of %s: %v, %d rules", app, err, len(rt.Rules))
		}
		return rt
	}
	if got := route(prof, "cli_a").Rules[0].Period(); got != time.Second+defaultJitter {
		t.Fatalf("before any measurement: period %v, want %v", got, time.Second+defaultJitter)
	}
	if !prof.Lower(providers.Learned{API: api, Window: learnedSecond, Limit: 20, Until: now.Add(time.Hour)}) {
		t.Fatal("Lower did not lower")
	}

	const base = "https://open.feishu.cn/open-apis/im/v1/messages"
	asApp := func(r *http.Request, app string) *http.Request {
		return r.WithContext(apps.NewContext(r.Context(), apps.App{ID: app}))
	}
	replyChat := func(p providers.Profile) string {
		rt, err := p.Route(asApp(httptest.NewRequest(http.MethodPost, base+"/om_1/reply", nil), "cli_a"))
		if err != nil {
			t.Fatal(err)
		}
		return rt.Scope(scopekind.Entity)
	}
	unknown := replyChat(prof)
	send := asApp(httptest.NewRequest(http.MethodPost, base+"?receive_id_type=chat_id&receive_id=oc_team", nil), "cli_a")
	routedClassify(prof, send, response(200, nil, answer("om_1", "oc_team", "")))
	learned := replyChat(prof)
	if learned == unknown {
		t.Fatal("a reply to a message an answer named is not keyed by its chat")
	}
	rebuilt, err := prof.Headroom.Rebuild(12 * time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if got := replyChat(rebuilt); got != learned {
		t.Errorf("after the rebuild a reply to om_1 counts against %q, want its chat's %q", got, learned)
	}
	rt := route(rebuilt, "cli_a")
	if rt.Rules[0].Limit() != 20 || rt.Rules[0].Period() != time.Second+12*time.Millisecond {
		t.Errorf("rebuilt: %d per %v, want the learned 20 per %v", rt.Rules[0].Limit(), rt.Rules[0].Period(), time.Second+12*time.Millisecond)
	}
	if rt := route(rebuilt, "cli_b"); rt.Rules[0].Period() != time.Second+12*time.Millisecond {
		t.Errorf("rebuilt, another app: period %v", rt.Rules[0].Period())
	}

	// An app added now reaches the live (rebuilt) profile too.
	if err := set.Add(App{AppID: "cli_c", APIs: map[string]int{api: 6}}); err != nil {
		t.Fatal(err)
	}
	if rt := route(rebuilt, "cli_c"); rt.Rules[0].Limit() != LevelTable()[6].PerSecond {
		t.Errorf("added after the rebuild: %d/s, want level 6's %d/s", rt.Rules[0].Limit(), LevelTable()[6].PerSecond)
	}
}

// An app added again with a lower level keeps only what was learned below
// its new level: a level learned under the old table never raises the new
// one (20/s learned at level 4, then level 6's 5/s: 5/s, and no minute
// rule, which level 6 lacks).
func TestReAddedAppKeepsNoLevelAboveItsConfig(t *testing.T) {
	const api = "GET /open-apis/contact/v3/users/:user_id"
	now := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	set := MustNew(Config{Clock: func() time.Time { return now }, Apps: []App{{AppID: "cli_a", APIs: map[string]int{api: 4}}}})
	prof := set.Profile()
	req := httptest.NewRequest(http.MethodGet, "https://open.feishu.cn/open-apis/contact/v3/users/ou_1", nil)
	req = req.WithContext(apps.NewContext(req.Context(), apps.App{ID: "cli_a"}))
	if !prof.Lower(providers.Learned{API: api, Window: learnedSecond, Limit: 20, Until: now.Add(time.Hour)}) {
		t.Fatal("Lower did not lower")
	}
	if err := set.Add(App{AppID: "cli_a", APIs: map[string]int{api: 6}}); err != nil {
		t.Fatal(err)
	}
	rt, err := prof.Route(req)
	if err != nil || len(rt.Rules) != 1 || rt.Rules[0].Limit() != 5 {
		t.Fatalf("after re-adding at level 6: %v, %v; want one rule of 5/s", rt.Rules, err)
	}
}

// A level learned before a rebuild for another latency allowance reaches
// the apps and tenants first seen after it: the rebuilt preset's app set
// shares what the first one lowered. It built them at the table's level
// for up to the 24 h the stored limit holds, every replica having read it
// as seen.
func TestRebuildKeepsLearnedLevelsForAppsSeenLater(t *testing.T) {
	const api = "GET /open-apis/contact/v3/users/:user_id"
	perSecond := func(prof providers.Profile, app string) int {
		t.Helper()
		req := httptest.NewRequest(http.MethodGet, "https://open.feishu.cn/open-apis/contact/v3/users/ou_1", nil)
		req = req.WithContext(apps.NewContext(req.Context(), apps.App{Provider: Name, ID: app, Org: "tenant1"}))
		rt, err := prof.Route(req)
		if err != nil {
			t.Fatal(err)
		}
		return rt.Rules[0].Limit()
	}
	prof := MustNew(Config{Apps: []App{{AppID: "cli_a", APIs: map[string]int{api: 4}}}, Unknown: App{APIs: map[string]int{api: 4}}}).Profile()
	if !prof.Lower(providers.Learned{API: api, Window: learnedSecond, Limit: 7, Until: time.Now().Add(time.Hour)}) {
		t.Fatal("not lowered")
	}
	if n := perSecond(prof, "cli_before"); n != 7 {
		t.Fatalf("an app first seen after the limit was learned: %d/s, want 7", n)
	}
	rebuilt, err := prof.Headroom.Rebuild(12 * time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if n := perSecond(rebuilt, "cli_after"); n != 7 {
		t.Errorf("an app first seen after the rebuild: %d/s, want the learned 7", n)
	}
}

// A rebuild keeps the lowest level in force, as a live profile does: a
// higher limit read after it (another replica's, stored last) lowers
// nothing, so neither the rebuilt apps nor those first seen after the
// rebuild take it, and a minute's limit learned beside the second's is
// kept with it.
func TestRebuildKeepsTheLowestLearnedLevel(t *testing.T) {
	const api = "GET /open-apis/contact/v3/users/:user_id"
	now := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	rules := func(prof providers.Profile, app string) (perSecond, perMinute int) {
		t.Helper()
		req := httptest.NewRequest(http.MethodGet, "https://open.feishu.cn/open-apis/contact/v3/users/ou_1", nil)
		req = req.WithContext(apps.NewContext(req.Context(), apps.App{Provider: Name, ID: app}))
		rt, err := prof.Route(req)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rt.Rules {
			switch r.Period() - 12*time.Millisecond {
			case time.Second:
				perSecond = r.Limit()
			case time.Minute:
				perMinute = r.Limit()
			}
		}
		return perSecond, perMinute
	}
	prof := MustNew(Config{Clock: func() time.Time { return now },
		Apps: []App{{AppID: "cli_a", APIs: map[string]int{api: 4}}}, Unknown: App{APIs: map[string]int{api: 4}}}).Profile()
	if !prof.Lower(providers.Learned{API: api, Window: learnedSecond, Limit: 20, Until: now.Add(time.Hour)}) ||
		!prof.Lower(providers.Learned{API: api, Window: learnedMinute, Limit: 600, Until: now.Add(time.Hour)}) {
		t.Fatal("not lowered")
	}
	if prof.Lower(providers.Learned{API: api, Window: learnedSecond, Limit: 30, Until: now.Add(2 * time.Hour)}) {
		t.Fatal("a higher limit lowered the level")
	}
	rebuilt, err := prof.Headroom.Rebuild(12 * time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	for _, app := range []string{"cli_a", "cli_later"} {
		if s, m := rules(rebuilt, app); s != 20 || m != 600 {
			t.Errorf("%s after the rebuild: %d/s and %d/min, want the learned 20 and 600", app, s, m)
		}
	}
}
