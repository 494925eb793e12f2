package feishu

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotaware/throttle/providers"
)

// throttled is Feishu's 99991400 with its headers.
func throttled(limit, reset string) *http.Response {
	h := http.Header{"Content-Type": {"application/json; charset=utf-8"}}
	if limit != "" {
		h.Set("X-Ogw-Ratelimit-Limit", limit)
	}
	if reset != "" {
		h.Set("X-Ogw-Ratelimit-Reset", reset)
	}
	return &http.Response{StatusCode: http.StatusTooManyRequests, Header: h, ContentLength: -1,
		Body: io.NopCloser(strings.NewReader(`{"code":99991400,"msg":"request trigger frequency limit"}`))}
}

// learningAPI is the API the learned-limit tests read users through, at
// level 4 (50/s, 1000/min).
const learningAPI = "GET /open-apis/contact/v3/users/:user_id"

// learning is a preset of one app whose clock reads *now, and a request
// to learningAPI.
func learning(t *testing.T, now *time.Time) (providers.Profile, *http.Request) {
	t.Helper()
	set, err := New(Config{Jitter: 10 * time.Millisecond, Clock: func() time.Time { return *now },
		Apps: []App{{AppID: "cli_a", APIs: map[string]int{learningAPI: 4}}}})
	if err != nil {
		t.Fatal(err)
	}
	return set.Profile(), httptest.NewRequest(http.MethodGet, "https://open.feishu.cn/open-apis/contact/v3/users/ou_1", nil)
}

func TestLearnedLimitOnlyEverLowers(t *testing.T) {
	const api = learningAPI
	now := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	prof, req := learning(t, &now)
	limits := func() (perSecond, perMinute int) {
		rt, err := prof.Route(req)
		if err != nil || len(rt.Rules) != 2 {
			t.Fatalf("route: %v, %d rules, want 2", err, len(rt.Rules))
		}
		return rt.Rules[0].Limit(), rt.Rules[1].Limit()
	}
	if s, m := limits(); s != 50 || m != 1000 {
		t.Fatalf("level 4 from the table: %d/s and %d/min, want 50 and 1000", s, m)
	}
	rt, _ := prof.Route(req)
	for _, c := range []struct{ limit, reset string }{
		{"50", "1"}, {"80", "1"}, // the table's, and above it: never raised
		{"1000", "30"}, {"5000", "30"},
		{"", "1"}, {"x", "1"}, {"-3", "1"}, {"0", "1"}, // garbled
	} {
		if v := prof.Classify(req, throttled(c.limit, c.reset), &rt); v.Learned != nil {
			t.Errorf("limit %q reset %q: learned %+v, want nothing", c.limit, c.reset, *v.Learned)
		}
	}
	// 20/s: the per-second cap is lowered, the minute's kept.
	v := prof.Classify(req, throttled("20", "1"), &rt)
	if v.Learned == nil || v.Learned.Window != "s" || v.Learned.Limit != 20 || !v.Learned.Until.Equal(now.Add(learnedTTL)) {
		t.Fatalf("learned %+v, want 20 per second for a day", v.Learned)
	}
	if !prof.Lower(*v.Learned) {
		t.Fatal("Lower did not lower")
	}
	if s, m := limits(); s != 20 || m != 1000 {
		t.Fatalf("after learning 20/s: %d/s and %d/min, want 20 and 1000", s, m)
	}
	// A stored limit above the one in force (another replica's older
	// answer) does not raise it back.
	if prof.Lower(providers.Learned{API: api, Window: "s", Limit: 40, Until: now.Add(time.Hour)}) {
		t.Error("Lower raised 20/s to 40/s")
	}
	// A reset over a second names the minute.
	v = prof.Classify(req, throttled("100", "42"), &rt)
	if v.Learned == nil || v.Learned.Window != "m" || !prof.Lower(*v.Learned) {
		t.Fatalf("learned %+v, want 100 per minute", v.Learned)
	}
	if s, m := limits(); s != 20 || m != 100 {
		t.Fatalf("after learning 100/min: %d/s and %d/min, want 20 and 100", s, m)
	}
	// Lapsed: the table's level again.
	now = now.Add(learnedTTL)
	if s, m := limits(); s != 50 || m != 1000 {
		t.Fatalf("a day later: %d/s and %d/min, want the table's 50 and 1000", s, m)
	}
}

// The reset header is read as the penalty's end is, fractions included:
// 12.5 seconds to wait is the minute's cap. Read as an integer it was 0,
// and a per-minute limit was learned as per-second.
func TestLearnedWindowFromAFractionalReset(t *testing.T) {
	now := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	prof, req := learning(t, &now)
	rt, _ := prof.Route(req)
	for _, c := range []struct {
		reset, window string
	}{{"12.5", "m"}, {"0.25", "s"}, {"1", "s"}} {
		v := prof.Classify(req, throttled("20", c.reset), &rt)
		if v.Learned == nil || v.Learned.Window != c.window {
			t.Errorf("reset %q: learned %+v, want a limit per %s", c.reset, v.Learned, c.window)
		}
	}
}

// A learned limit lowers only an API the preset routes to (a catalog or
// App.APIs template, or a method's stand-in): any other name lowers nothing
// a request could use, and each kept a route in every profile, a memory
// that a filled learned hash grew without end.
func TestLearnedLimitOnlyForKnownAPIs(t *testing.T) {
	now := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	prof, _ := learning(t, &now)
	until := now.Add(time.Hour)
	for api, want := range map[string]bool{
		learningAPI:                            true,
		"POST " + "uncatalogued":               true,
		"GET /open-apis/x/1/" + "made-up":      false,
		"GET /open-apis/contact/v3/users/ou_1": false, // a path, not its template
		"/open-apis/contact/v3/users/:user_id": false, // no method
	} {
		if got := prof.Lower(providers.Learned{API: api, Window: learnedSecond, Limit: 1, Until: until}); got != want {
			t.Errorf("%q: lowered %v, want %v", api, got, want)
		}
	}
}

// Limits of one API learned at once (an answer's on the request path,
// another replica's from the learned hash, the app set applying what it
// kept) each build on the other: neither window is lost, and a higher limit
// that lands last never raises the level. Stored without a compare-and-
// swap, tens of 3,000 such races lost one.
func TestConcurrentLearnedLimitsAllHold(t *testing.T) {
	const trials = 1000
	req := httptest.NewRequest(http.MethodGet, "https://open.feishu.cn/open-apis/contact/v3/users/ou_1", nil)
	for i := range trials {
		prof := MustNew(Config{NoJitter: true, Apps: []App{{AppID: "cli_a", APIs: map[string]int{learningAPI: 4}}}}).Profile()
		until := time.Now().Add(time.Hour)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for _, l := range []providers.Learned{
			{API: learningAPI, Window: learnedSecond, Limit: 20, Until: until},
			{API: learningAPI, Window: learnedMinute, Limit: 600, Until: until},
			{API: learningAPI, Window: learnedSecond, Limit: 30, Until: until},
		} {
			wg.Go(func() {
				<-start
				prof.Lower(l)
			})
		}
		close(start)
		wg.Wait()
		rt, err := prof.Route(req)
		if err != nil {
			t.Fatal(err)
		}
		if s, m := rt.Rules[0].Limit(), rt.Rules[1].Limit(); s != 20 || m != 600 {
			t.Fatalf("trial %d: %d/s and %d/min, want 20 and 600", i, s, m)
		}
	}
}
