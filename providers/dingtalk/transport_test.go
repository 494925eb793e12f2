package dingtalk_test

// Acceptance tests of the DingTalk preset in the Transport: several
// replicas, each its own Transport and go-redis client, share one real
// redis-server and call the DingTalk emulator (jittered latency) at five
// times the published per-API rate. Every figure is read from the
// emulator's own record of arrivals, never from the clients' view.

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/internal/loadtest"
	"github.com/quotaware/throttle/limiter/limitertest"
	"github.com/quotaware/throttle/providers/dingtalk"
	"github.com/quotaware/throttle/providers/dingtalk/dingtalktest"
	"github.com/quotaware/throttle/providers/internal/jsoncode"
	"github.com/quotaware/throttle/providers/internal/penaltytime"
	"github.com/quotaware/throttle/providers/internal/scopekind"
)

func TestMain(m *testing.M) { loadtest.Main(m) }

// The two APIs of every run: one of each generation, both ordinary reads.
const (
	oldPath = "/topapi/v2/user/get"             // oapi: access_token query, errcode body
	newPath = "/v1.0/contact/users/manager4220" // api: header token, HTTP status + string code
	demand  = 5                                 // calls fired per API, as a multiple of the published rate
	latency = 20 * time.Millisecond             // the emulator's latency varies in [0, latency]
)

var (
	paths     = []string{oldPath, newPath} // rates are given in this order
	oldAPI    = oldPath                    // both the preset and the emulator name APIs by their catalog's template
	newAPI    = "GET /v1.0/contact/users/{unionId}"
	published = float64(dingtalk.Standard.Rate()) // 20 calls/s per app and API
)

// fleet is n replicas of a service calling one emulator through the preset.
type fleet struct {
	emu     *dingtalktest.Server
	token   string
	clients []*http.Client
	results []result // every call driven so far
}

// result is one call as its caller saw it.
type result struct {
	replica int
	api     string
	start   time.Time
	end     time.Time
	code    string // the provider's error code in the answer; "" for a success
	err     error  // the Transport's error, when no answer came back
}

// newFleet starts the emulator and n replicas on the shared Redis, with
// keys under a prefix of their own. cfg is the preset's config; AppKey and
// Hosts are filled in.
func newFleet(t *testing.T, n int, emuOpts dingtalktest.Options, cfg dingtalk.Config, opts ...throttle.Option) *fleet {
	t.Helper()
	app := "ding" + limitertest.Group(t)
	f := &fleet{token: "tok-" + app}
	emuOpts.Tokens = map[string]string{f.token: app}
	emuOpts.LatencyMax = latency
	f.emu = dingtalktest.New(emuOpts)
	t.Cleanup(f.emu.Close)
	cfg.Apps[0].AppKey, cfg.Hosts = app, []string{f.emu.Host()}
	profile := dingtalk.MustNew(cfg).Profile()
	f.clients = loadtest.Replicas(t, n, append([]throttle.Option{throttle.WithProfiles(profile)}, opts...)...)
	return f
}

// call sends one request to paths[api] from replica i, as an SDK would.
func (f *fleet) call(ctx context.Context, i, api int) result {
	path := paths[api]
	var req *http.Request
	if strings.HasPrefix(path, "/v1.0/") {
		req, _ = http.NewRequestWithContext(ctx, http.MethodGet, f.emu.URL+path, nil)
		req.Header.Set("x-acs-dingtalk-access-token", f.token)
	} else {
		req, _ = http.NewRequestWithContext(ctx, http.MethodPost, f.emu.URL+path+"?access_token="+f.token,
			strings.NewReader(`{"userid":"manager4220","language":"zh_CN"}`))
		req.Header.Set("Content-Type", "application/json")
	}
	r := result{replica: i, api: []string{oldAPI, newAPI}[api], start: time.Now()}
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

// answerCode reads the provider's error code from an answer as a caller
// would, without the library: "" for a success.
func answerCode(status int, body []byte) string {
	if bytes.Contains(body, []byte(`"punish"`)) {
		return "ip-ban"
	}
	c, ok := jsoncode.Parse(body)
	switch {
	case ok && c.HasCode && c.Code == "88" && c.SubCode != "":
		return c.SubCode
	case ok && c.HasCode && c.Code != "0":
		return c.Code
	case status != http.StatusOK:
		return http.StatusText(status)
	}
	return ""
}

// drive fires calls from every replica until ctx ends, rates[j] calls per
// second to paths[j] in total (see loadtest.Drive), and adds them to
// f.results.
func (f *fleet) drive(ctx context.Context, rates []float64) {
	f.results = append(f.results, loadtest.Drive(ctx, len(f.clients), rates, f.call)...)
}

// both is the usual load: five times the published rate on each API.
var both = []float64{demand * published, demand * published}

// runFor drives the load from now until the wall clock reaches stop.
func (f *fleet) runFor(stop time.Time, rates []float64) {
	ctx, cancel := loadtest.Until(stop)
	defer cancel()
	f.drive(ctx, rates)
}

// tally counts the callers' outcomes.
func (f *fleet) tally() loadtest.Tally {
	var tl loadtest.Tally
	for _, r := range f.results {
		tl.Add(r.err, r.code == "", isQuotaCode(r.code))
	}
	return tl
}

func isQuotaCode(code string) bool {
	return code == "ip-ban" || strings.HasPrefix(code, "900") || strings.Contains(code, "Limit")
}

// arrivals returns the emulator's arrival times of the records that pass
// keep, in order.
func arrivals(recs []dingtalktest.Record, keep func(dingtalktest.Record) bool) []time.Time {
	var out []time.Time
	for _, r := range recs {
		if keep(r) {
			out = append(out, r.At)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	return out
}

func succeeded(api string, from, to time.Time) func(dingtalktest.Record) bool {
	return func(r dingtalktest.Record) bool {
		return r.API == api && r.Code == "" && r.Status == http.StatusOK && !r.At.Before(from) && r.At.Before(to)
	}
}

// Four replicas on one Redis, five times the published rate on two APIs for
// ten seconds: the emulator rejects nothing, the callers see no quota error,
// and each API gets at least 90% of its published rate.
func TestFourReplicasAtFiveTimesDemand(t *testing.T) {
	// A share of the rate under the measured allowance, which other
	// packages' load widens (76-80% seen beside them): run alone.
	loadtest.Alone(t)
	const (
		replicas = 4
		run      = 10 * time.Second
	)
	f := newFleet(t, replicas, dingtalktest.Options{}, dingtalk.Config{Apps: []dingtalk.App{{}}})
	start := time.Now()
	end := start.Add(run)
	f.runFor(end, both)

	recs := f.emu.Requests()
	st := f.emu.Stats()
	tl := f.tally()
	t.Logf("%d replicas, %v, demand %.0f calls/s per API (%d× the published %.0f/s), latency 0-%v",
		replicas, run, demand*published, demand, published, latency)
	t.Logf("callers: %d calls, %d answered (%d ok, %d quota errors, %d other errors), %d throttled locally, %d penalized, %d cancelled at the end, %d failed",
		tl.Calls, tl.Answered, tl.OK, tl.Quota, tl.OtherAnswers, tl.Throttled, tl.Penalized, tl.Cancelled, tl.Failed)
	t.Logf("emulator: %d requests, %d rejected, %d IP bans, %d banned answers", st.Requests, st.Rejected, st.Bans, st.BannedAnswers)

	if st.Rejected != 0 || st.Bans != 0 || st.BannedAnswers != 0 {
		t.Errorf("the emulator rejected %d calls and banned the IP %d times, want none", st.Rejected, st.Bans)
	}
	for _, r := range recs {
		if r.Code != "" {
			t.Errorf("the emulator answered %s %s at %v with %s", r.Method, r.Path, r.At.Format(time.StampMicro), r.Code)
			break
		}
	}
	tl.ExpectClean(t)
	for _, api := range []string{oldAPI, newAPI} {
		at := arrivals(recs, succeeded(api, start, end))
		got := loadtest.Measure(at, run)
		slidingMax, _ := limitertest.MaxInWindow(at, time.Second)
		t.Logf("%-32s %4d successes in %v: %.2f/s = %.1f%% of the published %.0f/s; busiest wall-clock second %d, busiest sliding second %d",
			api, got.N, run, got.Rate, 100*got.Rate/published, published, loadtest.Busiest(at, time.Second), slidingMax)
		got.Expect(t, api, published)
	}
}

// penaltyCase is one quota answer forced on the next call.
type penaltyCase struct {
	name   string
	status int
	body   func(end time.Time) string
	code   string // the code the emulator records for it
	// until is the end of the penalty the answer states or implies, given
	// the end written in the body and the moment the answer was sent.
	until func(end, sent time.Time) time.Time
}

// After one quota error, no replica calls that API until the penalty ends
// (calls already on the wire excepted), the other API keeps flowing, and the
// penalised API is called again once the penalty is over.
func TestQuotaErrorStopsTheAPIOnEveryReplica(t *testing.T) {
	cases := []penaltyCase{
		{
			name:   "old API 90018 with its end in errmsg",
			status: http.StatusOK,
			body: func(end time.Time) string {
				return `{"errcode":90018,"errmsg":"当前应用调用该接口的频率已超过限制, 处罚将在 ` +
					end.In(penaltytime.Beijing()).Format(time.DateTime) + ` 结束."}`
			},
			code:  "90018",
			until: func(end, _ time.Time) time.Time { return end },
		},
		{
			name:   "new API 403 QpsLimitForAppkeyAndApi",
			status: http.StatusForbidden,
			body: func(time.Time) string {
				return `{"code":"Forbidden.AccessDenied.QpsLimitForAppkeyAndApi","message":"The request has exceeded the QPS limit of the appkey and api","requestid":"0123456789abcdef"}`
			},
			code: "Forbidden.AccessDenied.QpsLimitForAppkeyAndApi",
			// The code implies "until the next second"; the Transport reads
			// the answer a little after it was sent, never before.
			until: func(_, sent time.Time) time.Time { return penaltytime.NextSecond(sent) },
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { testPenalty(t, tc) })
	}
}

// inFlight is how long after the quota answer left the emulator a call may
// still arrive because it was on its way already: the emulated latency plus
// the time the Transport takes to read the answer and share the penalty
// (a write, an announcement and a confirming read across replicas: tens of
// ms, given 150 so that a loaded machine's scheduling does not fail it).
const inFlight = latency + 150*time.Millisecond

func testPenalty(t *testing.T, tc penaltyCase) {
	const replicas = 4
	// Without retries, a call refused during the penalty ends refused:
	// with them it waits for the penalty's end within its budget.
	f := newFleet(t, replicas, dingtalktest.Options{}, dingtalk.Config{Apps: []dingtalk.App{{}}}, throttle.WithoutRetry())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.drive(ctx, both)
	}()
	// Let the replicas reach their pace, then force one quota answer on the
	// next call, whichever replica and API it comes from, with an end about
	// 1.5 s ahead (whole seconds: the platform writes no fractions).
	waitUntil(time.Now().Add(800 * time.Millisecond))
	end := time.Now().Add(1500 * time.Millisecond).Truncate(time.Second).Add(time.Second)
	f.emu.FailNext(1, tc.status, tc.body(end))
	waitUntil(end.Add(1500 * time.Millisecond))
	cancel()
	<-done

	recs := f.emu.Requests()
	var hit *dingtalktest.Record
	for i := range recs {
		if recs[i].Code == tc.code {
			hit = &recs[i]
			break
		}
	}
	if hit == nil {
		t.Fatalf("the emulator never answered %s: the forced answer was not sent", tc.code)
	}
	sent, api := hit.At, hit.API
	other := oldAPI
	if api == oldAPI {
		other = newAPI
	}
	until := tc.until(end, sent)
	inScope := func(r dingtalktest.Record) bool { return r.API == api }
	var early []dingtalktest.Record
	for _, r := range recs {
		if inScope(r) && r.At.After(sent.Add(inFlight)) && r.At.Before(until) {
			early = append(early, r)
		}
	}
	quotaAnswers := 0
	for _, r := range recs {
		if r.Code != "" {
			quotaAnswers++
		}
	}
	tl := f.tally()
	penalty := until.Sub(sent)
	otherDuring := arrivals(recs, succeeded(other, sent, until))
	t.Logf("quota answer %s on %s at %v, penalty until %v (%v)", tc.code, api,
		sent.Format("15:04:05.000"), until.Local().Format("15:04:05.000"), penalty.Round(time.Millisecond))
	t.Logf("in scope during the penalty: %d arrivals past the %v in-flight allowance; other API: %d successes (%.1f/s)",
		len(early), inFlight, len(otherDuring), float64(len(otherDuring))/penalty.Seconds())
	t.Logf("callers: %d calls, %d ok, %d quota answers, %d penalized without a call, %d throttled; emulator: %d error answers in all",
		tl.Calls, tl.OK, tl.Quota, tl.Penalized, tl.Throttled, quotaAnswers)

	for i, r := range early {
		if i == 5 {
			t.Errorf("... %d arrivals in all", len(early))
			break
		}
		t.Errorf("%s arrived at %v, %v after the quota answer and %v before the penalty's end",
			r.Path, r.At.Format("15:04:05.000000"), r.At.Sub(sent).Round(time.Millisecond), until.Sub(r.At).Round(time.Millisecond))
	}
	if quotaAnswers != 1 {
		t.Errorf("the emulator gave %d error answers, want only the forced one", quotaAnswers)
	}
	// The other API keeps flowing: at least half the published rate (the
	// window is short and the machine busy; a stopped API gets none).
	if want := 0.5 * published * penalty.Seconds(); float64(len(otherDuring)) < want {
		t.Errorf("the other API got %d successes during the %v penalty, want at least %.0f", len(otherDuring), penalty, want)
	}
	// Traffic resumes: a probe, then the paced rate.
	checkResumed(t, api, until, recs)
	// A penalty to the next second may last a few milliseconds, with no
	// slot in it to refuse; one of a fifth of a second holds several.
	if tl.Penalized == 0 && penalty-inFlight > 200*time.Millisecond {
		t.Errorf("no caller was refused with ErrPenalized: the penalty was not enforced locally")
	}
}

// checkResumed asserts that api is called again once its penalty is over:
// the first success comes within resumeWithin of the end, and the second
// after it has the paced rate back (at least half the published rate).
func checkResumed(t *testing.T, api string, until time.Time, recs []dingtalktest.Record) {
	t.Helper()
	after := arrivals(recs, succeeded(api, until, until.Add(time.Hour)))
	if len(after) == 0 {
		t.Errorf("%s was never called successfully after its penalty ended at %v", api, until.Local().Format("15:04:05.000"))
		return
	}
	first := after[0]
	inSecond := len(arrivals(recs, succeeded(api, first, first.Add(time.Second))))
	t.Logf("%s: first success %v after the penalty's end, %d in the second from it", api, first.Sub(until).Round(time.Millisecond), inSecond)
	if d := first.Sub(until); d > resumeWithin {
		t.Errorf("%s: first success %v after the penalty's end, want within %v", api, d.Round(time.Millisecond), resumeWithin)
	}
	if inSecond < int(published/2) {
		t.Errorf("%s: %d successes in the second after it resumed, want at least %.0f", api, inSecond, published/2)
	}
}

// resumeWithin is how soon after a penalty's end its scope must be called
// again: a probe at once, plus the latency and a few scheduling delays.
const resumeWithin = 300 * time.Millisecond

// The IP ban (the JSON {"status":1111,...,"punish":"deny"}) stops every API
// on every replica until the ban is over, then both APIs are called again.
func TestIPBanStopsEveryAPIOnEveryReplica(t *testing.T) {
	const (
		replicas = 4
		ban      = 2 * time.Second
	)
	// The emulator's 5-minute ban is scaled to 2 s, and the preset told so.
	f := newFleet(t, replicas, dingtalktest.Options{TimeScale: float64(5 * time.Minute / ban)},
		dingtalk.Config{IPBanPenalty: ban, Apps: []dingtalk.App{{}}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.drive(ctx, both)
	}()
	waitUntil(time.Now().Add(800 * time.Millisecond))
	f.emu.Ban()
	banned := time.Now()
	stop := banned.Add(ban + 1500*time.Millisecond)
	waitUntil(stop)
	cancel()
	<-done

	recs := f.emu.Requests()
	var bans []dingtalktest.Record
	for _, r := range recs {
		if r.Code == "ip-ban" {
			bans = append(bans, r)
		}
	}
	if len(bans) == 0 {
		t.Fatal("no call met the ban")
	}
	sent := bans[0].At
	// The Transport bans the egress from the moment it reads an answer,
	// which is after the emulator sent it: sent+ban is a lower bound.
	until := sent.Add(ban)
	var early []dingtalktest.Record
	for _, r := range recs {
		if r.At.After(sent.Add(inFlight)) && r.At.Before(until) {
			early = append(early, r)
		}
	}
	tl := f.tally()
	stopped := map[int]bool{}
	egress := scopekind.Of(scopekind.Egress, "default")
	for _, r := range f.results {
		var pe *throttle.PenaltyError
		if errors.As(r.err, &pe) && pe.Scope == egress {
			stopped[r.replica] = true
		}
	}
	t.Logf("first ban answer on %s at %v (%v after the ban began), %d ban answers in all, the last at %v; %d arrivals past the %v in-flight allowance before %v",
		bans[0].API, sent.Format("15:04:05.000"), sent.Sub(banned).Round(time.Millisecond), len(bans),
		bans[len(bans)-1].At.Format("15:04:05.000"), len(early), inFlight, until.Format("15:04:05.000"))
	t.Logf("callers: %d calls, %d ok, %d ban answers, %d refused with ErrPenalized; replicas refusing on %s: %d of %d",
		tl.Calls, tl.OK, tl.Quota, tl.Penalized, egress, len(stopped), replicas)

	for i, r := range early {
		if i == 5 {
			t.Errorf("... %d arrivals in all", len(early))
			break
		}
		t.Errorf("%s arrived at %v, %v after the first ban answer and %v before the ban's end",
			r.Path, r.At.Format("15:04:05.000000"), r.At.Sub(sent).Round(time.Millisecond), until.Sub(r.At).Round(time.Millisecond))
	}
	if len(stopped) != replicas {
		t.Errorf("%d of %d replicas refused calls on %s, want all", len(stopped), replicas, egress)
	}
	// Every further ban answer restarts the ban on our side: the ban ends
	// ban after the last one.
	end := bans[len(bans)-1].At.Add(ban)
	if end.After(stop.Add(-time.Second)) {
		t.Errorf("the ban answered until %v and lasted on our side until %v at least: calls sent during the ban prolonged it",
			bans[len(bans)-1].At.Format("15:04:05.000"), end.Format("15:04:05.000"))
		return
	}
	for _, api := range []string{oldAPI, newAPI} {
		checkResumed(t, api, end, recs)
	}
}

// A quiet API is not held back by a busy one. Both share the per-IP rule
// (10,000 per 20 s, far from binding), so a call to an API that is well under
// its own limit must go out at once, however far ahead the busy API has
// booked its slots.
func TestQuietAPINotHeldBackByABusyOne(t *testing.T) {
	const (
		replicas = 2
		run      = 4 * time.Second
	)
	quiet := published / 4
	f := newFleet(t, replicas, dingtalktest.Options{}, dingtalk.Config{Apps: []dingtalk.App{{}}})
	start := time.Now()
	f.runFor(start.Add(run), []float64{demand * published, quiet}) // oldPath busy, newPath quiet

	var waits []time.Duration
	throttled := 0
	for _, r := range f.results {
		if r.api != newAPI || r.start.Before(start.Add(time.Second)) {
			continue // the first second: the busy API is still booking ahead
		}
		switch {
		case r.err == nil:
			waits = append(waits, r.end.Sub(r.start))
		case errors.Is(r.err, throttle.ErrThrottled):
			throttled++
		}
	}
	sort.Slice(waits, func(i, j int) bool { return waits[i] < waits[j] })
	if len(waits) == 0 {
		t.Fatalf("no call to the quiet API %s succeeded; %d throttled", newAPI, throttled)
	}
	p50, p90 := waits[len(waits)/2], waits[len(waits)*9/10]
	t.Logf("quiet API at %.0f/s next to a busy one at %.0f/s: %d answered, %d throttled; time in RoundTrip p50 %v, p90 %v",
		quiet, demand*published, len(waits), throttled, p50.Round(time.Millisecond), p90.Round(time.Millisecond))
	// Held behind the busy API's slots, the quiet one waits up to the
	// budget (2 s) and is refused past it; time in RoundTrip is wall-clock
	// time, which a loaded machine stretches (150 ms seen under load, three
	// quarters of the 200 ms bound this test had: with 15-20 calls p90 is
	// the second slowest), so the bound is 500 ms.
	if throttled > 0 || p90 > 500*time.Millisecond {
		t.Errorf("the quiet API waited p90 %v and had %d calls refused with ErrThrottled; want no refusal and p90 under 500ms (latency is at most %v)",
			p90.Round(time.Millisecond), throttled, latency)
	}
}

// waitUntil blocks until the wall clock reaches at.
func waitUntil(at time.Time) {
	if d := time.Until(at); d > 0 {
		<-time.After(d)
	}
}
