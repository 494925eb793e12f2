package appset

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotaware/throttle/apps"
	"github.com/quotaware/throttle/providers"
)

// profileOf is a profile whose Route names the app it was built for.
func profileOf(name string) providers.Profile {
	return providers.Profile{
		Name:  "acme",
		Match: func(*http.Request) bool { return true },
		Route: func(*http.Request) (providers.Route, error) { return providers.Route{API: name}, nil },
	}
}

func requestAs(app *apps.App) *http.Request {
	req, _ := http.NewRequest(http.MethodGet, "https://api.acme.example/v1/x", nil)
	if app != nil {
		req = req.WithContext(apps.NewContext(req.Context(), *app))
	}
	return req
}

func TestPick(t *testing.T) {
	build := func(a apps.App) (providers.Profile, string, error) {
		if a.ID == "bad" {
			return providers.Profile{}, "", errors.New("no such app")
		}
		return profileOf("built " + a.ID), a.ID, nil
	}
	cases := []struct {
		name  string
		build func(apps.App) (providers.Profile, string, error)
		app   *apps.App
		want  string
	}{
		{"no app", build, nil, "fallback"},
		{"listed app", build, &apps.App{ID: "a1"}, "a1"},
		{"listed app of this provider", build, &apps.App{Provider: "acme", ID: "a1", Learned: true}, "a1"},
		{"another provider's app", build, &apps.App{Provider: "other", ID: "a1"}, "fallback"},
		{"unlisted app is built", build, &apps.App{Provider: "acme", ID: "a2", Learned: true}, "built a2"},
		// A caller's tag names no provider: without a token this replica
		// knows, an unlisted app in it is built (the Transport's test of
		// one beside a known token: TestCallerTagOfAnotherProvidersApp).
		{"unlisted app the caller named", build, &apps.App{ID: "a2"}, "built a2"},
		{"unlisted tenant the caller named", build, &apps.App{ID: "a2", Org: "o1"}, "built a2"},
		{"an app that fails to build", build, &apps.App{Provider: "acme", ID: "bad", Learned: true}, "fallback"},
		{"unlisted app without Build", nil, &apps.App{Provider: "acme", ID: "a2", Learned: true}, "fallback"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(Config{Name: "acme", Match: func(*http.Request) bool { return true }, Fallback: profileOf("fallback"), Build: tc.build},
				[]string{"a1"}, []providers.Profile{profileOf("a1")})
			if err != nil {
				t.Fatal(err)
			}
			r, err := s.Profile().Route(requestAs(tc.app))
			if err != nil || r.API != tc.want {
				t.Errorf("routed to %q (%v), want %q", r.API, err, tc.want)
			}
		})
	}
}

func TestBuiltAppIsKept(t *testing.T) {
	calls := 0
	s, err := New(Config{Name: "acme", Match: func(*http.Request) bool { return true }, Fallback: profileOf("fallback"),
		Build: func(a apps.App) (providers.Profile, string, error) { calls++; return profileOf(a.ID), a.ID, nil }}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		s.Pick(requestAs(&apps.App{Provider: "acme", Learned: true, ID: "a9"}))
	}
	if calls != 1 || s.Len() != 1 {
		t.Errorf("built %d times, holding %d profiles; want once, 1", calls, s.Len())
	}
}

// The apps a set builds as requests name them are bounded: an exchange
// names its app before any answer, so made-up IDs (a service checking
// credentials its users type) used to grow the set without end. Listed
// apps stay; a learned app forgotten is built again when named.
func TestLearnedAppsBounded(t *testing.T) {
	var mu sync.Mutex
	calls := map[string]int{}
	s, err := New(Config{Name: "acme", Match: func(*http.Request) bool { return true }, Fallback: profileOf("fallback"),
		Build: func(a apps.App) (providers.Profile, string, error) {
			mu.Lock()
			calls[a.ID]++
			mu.Unlock()
			return profileOf(a.ID), a.ID, nil
		}}, []string{"listed"}, []providers.Profile{profileOf("listed")})
	if err != nil {
		t.Fatal(err)
	}
	route := func(id string) string {
		r, err := s.Profile().Route(requestAs(&apps.App{Provider: "acme", Learned: true, ID: id}))
		if err != nil {
			t.Fatal(err)
		}
		return r.API
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range maxLearned * 3 / 4 {
				if got, id := route(fmt.Sprintf("made-up-%d-%d", w, i)), fmt.Sprintf("made-up-%d-%d", w, i); got != id {
					t.Errorf("routed %q as %q", id, got)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := s.Len(); n > maxLearned+1 {
		t.Fatalf("holding %d profiles after %d made-up apps, want at most %d", n, 3*maxLearned, maxLearned+1)
	}
	if got := route("listed"); got != "listed" || calls["listed"] != 0 {
		t.Fatalf("the listed app routed as %q, built %d times", got, calls["listed"])
	}
	if got := route("made-up-0-0"); got != "made-up-0-0" {
		t.Fatalf("a forgotten app routed as %q, want it built again", got)
	}
}

func TestKey(t *testing.T) {
	byOrg := func(a apps.App) string { return a.Org }
	s, err := New(Config{Name: "acme", Match: func(*http.Request) bool { return true }, Fallback: profileOf("fallback"), Key: byOrg},
		[]string{"org1"}, []providers.Profile{profileOf("org1")})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Pick(requestAs(&apps.App{ID: "suite", Org: "org1"})); got == nil {
		t.Fatal("nil profile")
	} else if r, _ := got.Route(nil); r.API != "org1" {
		t.Errorf("picked %q, want the org's profile", r.API)
	}
}

func TestConfigErrors(t *testing.T) {
	match := func(*http.Request) bool { return true }
	for missing, c := range map[string]Config{
		"Name":     {Match: match, Fallback: profileOf("f")},
		"Match":    {Name: "acme", Fallback: profileOf("f")},
		"Fallback": {Name: "acme", Match: match},
	} {
		if _, err := New(c, nil, nil); err == nil || !strings.Contains(err.Error(), "Config."+missing) {
			t.Errorf("a Config without %s: error %v, want one naming Config.%[1]s", missing, err)
		}
	}
	if _, err := New(Config{Name: "acme", Match: match, Fallback: profileOf("f")}, []string{"a", "b"}, []providers.Profile{profileOf("a")}); err == nil {
		t.Error("two keys for one profile were accepted")
	}
}

// Apps added while requests are picked are seen by later picks, and no
// pick sees a half-written set (run with -race).
func TestAddWhilePicking(t *testing.T) {
	s, err := New(Config{Name: "acme", Match: func(*http.Request) bool { return true }, Fallback: profileOf("fallback")}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		req := requestAs(&apps.App{Provider: "acme", Learned: true, ID: "a5"})
		for ctx.Err() == nil {
			s.Pick(req)
		}
	})
	for i := range 10 {
		s.Add("a"+string(rune('0'+i)), nil, profileOf("a"+string(rune('0'+i))))
	}
	cancel()
	wg.Wait()
	if r, _ := s.Pick(requestAs(&apps.App{Provider: "acme", Learned: true, ID: "a5"})).Route(nil); r.API != "a5" || s.Len() != 10 {
		t.Errorf("after adding: picked %q of %d profiles, want a5 of 10", r.API, s.Len())
	}
}

// One app listed twice is refused, naming both entries: the last entry
// used to win without a word, and the two counted as two apps, so that
// requests of no named app went to the unknown scope rather than to it.
func TestBuildRefusesAnAppListedTwice(t *testing.T) {
	_, err := Build(Spec[string]{
		Name: "acme", Apps: []string{"a", "b", "a"}, ID: func(a string) string { return a },
		Build:   func(a string) (providers.Profile, error) { return profileOf(a), nil },
		Unknown: func([]string) (providers.Profile, error) { return profileOf("unknown"), nil },
	})
	if err == nil || !strings.Contains(err.Error(), "Config.Apps[2]") || !strings.Contains(err.Error(), "Config.Apps[0]") {
		t.Fatalf("an app listed twice: %v, want an error naming Config.Apps[2] and [0]", err)
	}
}

// Add replacing the listed app that is the fallback replaces the fallback
// too: requests of no app tag were routed by the app's first rules for
// good (a one-app preset's Add changed nothing they used), and another
// app's Add leaves the fallback alone.
func TestAddReplacesTheFallbackApp(t *testing.T) {
	for _, tc := range []struct {
		name, fallbackKey, added, want string
	}{
		{"the fallback's app", "a1", "a1", "a1 again"},
		{"another app", "a1", "a2", "a1"},
		{"a fallback of no app", "", "a1", "a1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fallback := profileOf("a1")
			s, err := New(Config{Name: "acme", Match: func(*http.Request) bool { return true }, Fallback: fallback, FallbackKey: tc.fallbackKey},
				[]string{"a1"}, []providers.Profile{profileOf("a1")})
			if err != nil {
				t.Fatal(err)
			}
			s.Add(tc.added, nil, profileOf(tc.added+" again"))
			if r, _ := s.Profile().Route(requestAs(nil)); r.API != tc.want {
				t.Errorf("a request of no app routed to %q, want %q", r.API, tc.want)
			}
		})
	}
}

// With no default app, the fallback is the conservative profile of no app
// that the listed apps set (DingTalk's lowest rate); an app added later is
// one of them, so Add builds it again, and a build that fails leaves every
// profile as it was.
func TestAddRebuildsTheProfileOfNoApp(t *testing.T) {
	set, err := Build(Spec[string]{
		Name: "acme", Apps: []string{"a", "b"}, ID: func(a string) string { return strings.TrimSuffix(a, "!") }, UnknownReadsApps: true,
		Build: func(a string) (providers.Profile, error) { return profileOf(a), nil },
		Unknown: func(listed []string) (providers.Profile, error) {
			if slices.ContainsFunc(listed, func(a string) bool { return strings.HasSuffix(a, "!") }) {
				return providers.Profile{}, errors.New("no profile of no app")
			}
			return profileOf("unknown of " + strings.Join(listed, ",")), nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	untagged := func() string {
		r, _ := set.Profile().Route(requestAs(nil))
		return r.API
	}
	if got := untagged(); got != "unknown of a,b" {
		t.Fatalf("before Add: %q", got)
	}
	for _, app := range []string{"c", "a"} {
		if err := set.Add(app, app, profileOf(app)); err != nil {
			t.Fatal(err)
		}
	}
	if got := untagged(); got != "unknown of a,b,c" {
		t.Errorf("after adding c and replacing a: %q, want the profile of a, b and c", got)
	}
	if err := set.Add("d", "d!", profileOf("d")); err == nil {
		t.Error("Add took an app whose profile of no app could not be built")
	}
	if got := untagged(); got != "unknown of a,b,c" || set.Len() != 3 {
		t.Errorf("after a failed Add: %q of %d apps, want it unchanged of 3", got, set.Len())
	}
}

// A limit learned before a profile is built reaches it when it is built
// (an app first seen later, or one added): the Transport applies a stored
// limit once, when it first reads it, so such a profile ran at the table's
// level until the stored value changed (a day for Feishu's).
func TestLearnedLimitsReachProfilesBuiltLater(t *testing.T) {
	var mu sync.Mutex
	got := map[string][]providers.Learned{} // by app: the limits its profile took
	profile := func(app string) providers.Profile {
		p := profileOf(app)
		p.Lower = func(l providers.Learned) bool {
			mu.Lock()
			defer mu.Unlock()
			got[app] = append(got[app], l)
			return true
		}
		return p
	}
	set, err := New(Config{Name: "acme", Match: func(*http.Request) bool { return true }, Fallback: profile("fallback"),
		Build: func(a apps.App) (providers.Profile, string, error) { return profile(a.ID), a.ID, nil }},
		[]string{"a1"}, []providers.Profile{profile("a1")})
	if err != nil {
		t.Fatal(err)
	}
	l := providers.Learned{API: "GET /x/:id", Window: "s", Limit: 1, Until: time.Now().Add(time.Hour)}
	set.Profile().Lower(l)
	set.Pick(requestAs(&apps.App{Provider: "acme", Learned: true, ID: "a2"})) // built now
	set.Add("a3", nil, profile("a3"))
	mu.Lock()
	defer mu.Unlock()
	for _, app := range []string{"fallback", "a1", "a2", "a3"} {
		if len(got[app]) != 1 || got[app][0] != l {
			t.Errorf("%s took %v, want the one limit learned", app, got[app])
		}
	}
}
