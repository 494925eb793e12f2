package dingtalk_test

// Acceptance tests of many apps behind one Transport per replica: three
// internal apps and one ISV suite installed in five customer orgs, called by
// an SDK-like client that only fetches tokens and sends them (no context
// hints). Each replica's Transport learns the tokens' apps and orgs from the
// exchanges (or from Redis, for tokens another replica fetched).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/apps"
	"github.com/quotaware/throttle/internal/loadtest"
	"github.com/quotaware/throttle/providers/dingtalk"
	"github.com/quotaware/throttle/providers/dingtalk/dingtalktest"
	"github.com/quotaware/throttle/providers/internal/penaltytime"
)

// credential is one app, or the suite in one customer org, as the service
// holds it; rate is its published per-API rate.
type credential struct {
	app, org, secret string
	isv, oldAPI      bool // oldAPI: the token comes from the old API's exchange
	rate             float64
}

func (c credential) name() string {
	if c.org != "" {
		return c.app + "@" + c.org
	}
	return c.app
}

// The published rates are scaled down (PerAPIRate and ISVRate overrides,
// told to the emulator too) so that 8 credentials at five times their rate
// put no more load on a 2-core test machine than the single-app test does
// (about 200 calls/s): the standard edition's 20/s becomes 6, the
// professional's 40 becomes 12, an app overridden to 3, the suite's 40 per
// org becomes 4.
const (
	stdRate  = 6
	proRate  = 12
	slowRate = 3
	isvRate  = 4
)

func multiAppCredentials() []credential {
	creds := []credential{
		{app: "dingStandard", secret: "s1", rate: stdRate, oldAPI: true}, // old API
		{app: "dingPro", secret: "s2", rate: proRate},                    // new API
		{app: "dingSlow", secret: "s3", rate: slowRate, oldAPI: true},    // an override
	}
	for i := range 5 {
		creds = append(creds, credential{app: "suiteISV", org: fmt.Sprintf("corp%d", i), secret: "ss", isv: true, rate: isvRate, oldAPI: i >= 3})
	}
	return creds
}

// appsFleet is the replicas, the emulator and the tokens the service holds.
type appsFleet struct {
	emu     *dingtalktest.Server
	clients []*http.Client
	books   []*apps.Book
	creds   []credential
	tokens  []string // by credential
}

func newAppsFleet(t *testing.T, replicas int, creds []credential, opts ...throttle.Option) *appsFleet {
	t.Helper()
	f := &appsFleet{creds: creds}
	emuOpts := dingtalktest.Options{
		LatencyMax: latency, ISVQPS: isvRate, MonthlyQuota: -1,
		Apps: map[string]string{}, AppQPS: map[string]int{}, Suites: map[string]string{"suiteISV": "ss"},
	}
	for _, c := range creds {
		if !c.isv {
			emuOpts.Apps[c.app], emuOpts.AppQPS[c.app] = c.secret, int(c.rate)
		}
	}
	f.emu = dingtalktest.New(emuOpts)
	t.Cleanup(f.emu.Close)
	// Jitter is fixed: see loadtest.AppsJitter.
	set := dingtalk.MustNew(dingtalk.Config{Hosts: []string{f.emu.Host()}, Jitter: loadtest.AppsJitter, Apps: []dingtalk.App{{AppKey: "dingStandard", PerAPIRate: stdRate}, {AppKey: "dingPro", PerAPIRate: proRate}, {AppKey: "dingSlow", PerAPIRate: slowRate}, {AppKey: "suiteISV", ISV: true, ISVRate: isvRate}}})
	f.clients, f.books = loadtest.AppReplicas(t, replicas, append([]throttle.Option{throttle.WithProfiles(set.Profile())}, opts...)...)
	// The service keeps its tokens where every replica finds them (as SDKs
	// with a shared token cache do): each credential is fetched by one
	// replica, whose Transport learns it and shares it through Redis.
	for k, c := range creds {
		tok, err := fetchToken(f.clients[k%replicas], f.emu.URL, c)
		if err != nil {
			t.Fatalf("token of %s: %v", c.name(), err)
		}
		f.tokens = append(f.tokens, tok)
	}
	return f
}

// fetchToken calls the credential's token endpoint as an SDK would.
func fetchToken(client *http.Client, base string, c credential) (string, error) {
	var req *http.Request
	switch {
	case c.isv && c.oldAPI:
		req, _ = http.NewRequest(http.MethodPost, base+"/service/get_corp_token?accessKey="+c.app+"&timestamp=1&suiteTicket=tk&signature=sig",
			strings.NewReader(`{"auth_corpid":"`+c.org+`"}`))
	case c.isv:
		req, _ = http.NewRequest(http.MethodPost, base+"/v1.0/oauth2/corpAccessToken",
			strings.NewReader(`{"suiteKey":"`+c.app+`","suiteSecret":"`+c.secret+`","authCorpId":"`+c.org+`","suiteTicket":"tk"}`))
	case c.oldAPI:
		req, _ = http.NewRequest(http.MethodGet, base+"/gettoken?appkey="+c.app+"&appsecret="+c.secret, nil)
	default:
		req, _ = http.NewRequest(http.MethodPost, base+"/v1.0/oauth2/accessToken",
			strings.NewReader(`{"appKey":"`+c.app+`","appSecret":"`+c.secret+`"}`))
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var a struct {
		Old string `json:"access_token"`
		New string `json:"accessToken"`
	}
	if err := json.Unmarshal(raw, &a); err != nil || a.Old+a.New == "" {
		return "", fmt.Errorf("token answer %s", raw)
	}
	return a.Old + a.New, nil
}

// call sends one API call of credential k from replica i, carrying only the
// token. Every credential calls the new API here, whichever generation its
// token came from, so that each credential's share is of one API's limit
// (TestISVPenaltyStaysInItsOrg calls both generations). Calls alternating
// between POST /topapi/v2/user/get and the new API also got 0 rejections
// on an otherwise idle machine; a few rejections seen with a load average
// of 8-18 came with the same late wakes as the single-app test's.
func (f *appsFleet) call(ctx context.Context, i, k int) result {
	c, tok := f.creds[k], f.tokens[k]
	return f.send(ctx, i, c, tok, false)
}

// send makes one call of c with tok, on the old API or the new.
func (f *appsFleet) send(ctx context.Context, i int, c credential, tok string, oldAPI bool) result {
	var req *http.Request
	if oldAPI {
		req, _ = http.NewRequestWithContext(ctx, http.MethodPost, f.emu.URL+oldPath+"?access_token="+tok,
			strings.NewReader(`{"userid":"manager4220","language":"zh_CN"}`))
		req.Header.Set("Content-Type", "application/json")
	} else {
		req, _ = http.NewRequestWithContext(ctx, http.MethodGet, f.emu.URL+newPath, nil)
		req.Header.Set("x-acs-dingtalk-access-token", tok)
	}
	r := result{replica: i, api: c.name(), start: time.Now()}
	resp, err := f.clients[i].Do(req)
	if err != nil {
		r.err, r.end = err, time.Now()
		return r
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	r.end = time.Now()
	r.code = answerCode(resp.StatusCode, body)
	return r
}

// Three apps and a suite in five orgs, each at five times its own rate,
// through four replicas on one Redis: no call is rejected, and each app and
// each org gets at least 90% of its own published rate.
func TestManyAppsAtFiveTimesDemand(t *testing.T) {
	const (
		replicas = 4
		run      = 10 * time.Second
	)
	f := newAppsFleet(t, replicas, multiAppCredentials())
	rates := make([]float64, len(f.creds))
	for k, c := range f.creds {
		rates[k] = demand * c.rate
	}
	start := time.Now()
	end := start.Add(run)
	ctx, cancel := loadtest.Until(end)
	results := loadtest.Drive(ctx, replicas, rates, f.call)
	cancel()

	st := f.emu.Stats()
	var tl loadtest.Tally
	for _, r := range results {
		tl.Add(r.err, r.code == "", isQuotaCode(r.code))
	}
	t.Logf("callers: %s", tl)
	t.Logf("emulator: %d requests, %d rejected, %d IP bans", st.Requests, st.Rejected, st.Bans)
	loadtest.ExpectAllKnown(t, f.books)
	if st.Rejected != 0 || st.Bans != 0 {
		t.Errorf("the emulator rejected %d calls and banned the IP %d times, want none", st.Rejected, st.Bans)
	}
	tl.ExpectClean(t)
	recs := f.emu.Requests()
	for _, r := range recs {
		if r.Code != "" {
			t.Errorf("the emulator answered %s of %s@%s at %v with %s", r.Path, r.App, r.Org, r.At.Format(time.StampMicro), r.Code)
		}
	}
	for _, c := range f.creds {
		at := arrivals(recs, func(r dingtalktest.Record) bool {
			return r.App == c.app && r.Org == c.org && r.Code == "" && r.Status == http.StatusOK &&
				!strings.Contains(r.Path, "token") && !r.At.Before(start) && r.At.Before(end)
		})
		got := loadtest.Measure(at, run)
		t.Logf("%-16s %4d successes in %v: %.2f/s = %.1f%% of its %.0f/s; busiest wall-clock second %d",
			c.name(), got.N, run, got.Rate, 100*got.Rate/c.rate, c.rate, loadtest.Busiest(at, time.Second))
		got.Expect(t, c.name(), c.rate)
	}
}

// A quota error of the suite in one org penalises that org's API only: the
// other orgs' calls are never refused, and the penalised org is refused
// only within its penalty.
func TestISVPenaltyStaysInItsOrg(t *testing.T) {
	const (
		replicas = 4
		run      = 3 * time.Second
	)
	var creds []credential
	for _, c := range multiAppCredentials() {
		if c.isv {
			creds = append(creds, c)
		}
	}
	// Without retries, a call refused during the penalty ends refused:
	// with them it waits for the penalty's end within its budget.
	f := newAppsFleet(t, replicas, creds, throttle.WithoutRetry())
	rates := make([]float64, len(creds))
	for k, c := range creds {
		rates[k] = demand * c.rate
	}
	// corp0's next call: one 90019 (the suite's per-org limit) whose
	// message states its end, a second or two ahead: a penalty long
	// enough that calls come within it, wherever in a second it lands (a
	// penalty to the next second could last a few milliseconds).
	end := time.Now().Add(2500 * time.Millisecond).Truncate(time.Second)
	f.emu.FailNextIn("corp0", 1, http.StatusOK,
		`{"errcode":90019,"errmsg":"当前应用调用该接口的频率已超过限制, 处罚将在 `+end.In(penaltytime.Beijing()).Format(time.DateTime)+` 结束."}`)
	ctx, cancel := loadtest.Until(time.Now().Add(run))
	results := loadtest.Drive(ctx, replicas, rates, func(ctx context.Context, i, k int) result {
		return f.send(ctx, i, f.creds[k], f.tokens[k], f.creds[k].oldAPI)
	})
	cancel()

	penalized := map[string]int{}
	for _, r := range results {
		var pe *throttle.PenaltyError
		if errors.As(r.err, &pe) {
			penalized[r.api]++
		}
	}
	t.Logf("penalised calls by org: %v", penalized)
	if penalized["suiteISV@corp0"] == 0 {
		t.Error("corp0 got a quota error but none of its calls was refused")
	}
	for _, c := range creds[1:] {
		if n := penalized[c.name()]; n != 0 {
			t.Errorf("%s: %d calls refused for corp0's penalty, want 0", c.name(), n)
		}
	}
	if st := f.emu.Stats(); st.Rejected != 0 {
		t.Errorf("the emulator rejected %d calls, want none", st.Rejected)
	}
}

// A lone ISV suite without a CorpID is no default: it names no org for a
// request of no known app, which goes to the conservative unknown scope
// rather than failing every call as the suite's. A request tagged with the
// suite and no org fails with an error that says how to name one.
func TestLoneISVSuiteIsNoDefault(t *testing.T) {
	p := dingtalk.MustNew(dingtalk.Config{Apps: []dingtalk.App{{AppKey: "suiteKey", ISV: true}}}).Profile()
	untagged, _ := http.NewRequest(http.MethodGet, "https://api.dingtalk.com/v1.0/contact/users/u1", nil)
	r, err := p.Route(untagged)
	if err != nil {
		t.Fatalf("a request of no app: %v, want it routed to the unknown scope", err)
	}
	if !strings.Contains(strings.Join(r.Scopes, " "), "unknown") {
		t.Errorf("a request of no app: scopes %q, want the unknown scope", r.Scopes)
	}
	tagged := untagged.WithContext(throttle.ContextWithApp(context.Background(), "suiteKey"))
	if _, err := p.Route(tagged); err == nil || !strings.Contains(err.Error(), "throttle.ContextWithTenant") {
		t.Errorf("the suite's request without an org: %v, want an error naming ContextWithTenant", err)
	}
	withOrg := untagged.WithContext(throttle.ContextWithTenant(context.Background(), "suiteKey", "dingcorp1"))
	if r, err := p.Route(withOrg); err != nil || !strings.Contains(r.Rules[0].Key(), "suiteKey@dingcorp1") {
		t.Errorf("the suite in an org: %v, %v", r.Rules, err)
	}
}

// An Add that would make the only app listed, which requests of no known
// app go to, an ISV suite without a CorpID is refused, as one making the
// Default such a suite is: those requests would all fail.
func TestAddKeepsTheOnlyAppAbleToTakeRequestsOfNoApp(t *testing.T) {
	p := dingtalk.MustNew(dingtalk.Config{Apps: []dingtalk.App{{AppKey: "k1", ISV: true, CorpID: "dingcorp1"}}})
	if err := p.Add(dingtalk.App{AppKey: "k1", ISV: true}); err == nil || !strings.Contains(err.Error(), "the only app listed") {
		t.Fatalf("Add: %v, want it refused", err)
	}
	req, _ := http.NewRequest(http.MethodGet, "https://api.dingtalk.com/v1.0/contact/users/u1", nil)
	if _, err := p.Profile().Route(req); err != nil {
		t.Fatalf("a request of no app after the refused Add: %v", err)
	}
}
