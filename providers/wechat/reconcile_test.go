package wechat_test

// Acceptance of Config.Reconcile: four replicas on one redis-server call
// one daily-quota API of the WeChat emulator at a demand above the quota;
// the emulator answers quota/get from its own counts. Every figure is read
// from the emulator's record.

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/internal/loadtest"
	"github.com/quotaware/throttle/limiter/limitertest"
	"github.com/quotaware/throttle/providers/wechat"
	"github.com/quotaware/throttle/providers/wechat/wechattest"
)

const (
	recAPI      = "/cgi-bin/message/custom/send"
	recReplicas = 4
	recRun      = 3 * time.Second
	recEvery    = time.Second // each replica may read once a second; the lease makes it one a second in all
)

// recRun fires rate calls a second in all at recAPI from four replicas
// reconciling their quotas, and returns the emulator and what the callers
// saw. presetDaily is the preset's quota of recAPI, emuDaily the emulator's
// (WeChat's), spent the calls another client made before the start.
func recRunFleet(t *testing.T, reconcile bool, presetDaily, emuDaily, spent int, rate float64) (*wechattest.Server, string, loadtest.Tally) {
	t.Helper()
	app := "wx" + limitertest.Group(t)
	emu := wechattest.NewServer(wechattest.Options{
		Limits:     wechattest.Limits{Daily: map[string]int{recAPI: emuDaily}},
		LatencyMax: 5 * time.Millisecond,
	})
	t.Cleanup(emu.Close)
	emu.Spend(app, recAPI, spent)
	u, _ := url.Parse(emu.URL)
	cfg := wechat.Config{
		Hosts: []string{u.Hostname()}, Reconcile: reconcile, ReconcileEvery: recEvery,
		Apps: []wechat.App{{AppID: app, Daily: map[string]int{recAPI: presetDaily}}},
	}
	clients := loadtest.Replicas(t, recReplicas, throttle.WithProfiles(wechat.MustNew(cfg).Profile()))
	token := emu.Token(app)
	call := func(ctx context.Context, i, _ int) loadtest.Result {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, emu.URL+recAPI+"?access_token="+token,
			strings.NewReader(`{"touser":"o6_bmjrPTlm6_2sgVt7hMZOPfL2M","msgtype":"text","text":{"content":"hi"}}`))
		return loadtest.Send(clients[i], req, "errcode")
	}
	ctx, cancel := loadtest.Until(time.Now().Add(recRun))
	defer cancel()
	results := loadtest.Drive(ctx, recReplicas, []float64{rate}, call)
	return emu, app, loadtest.Count(results, isQuotaCode)
}

// recCount is the emulator's record of recAPI's successes and 45009s, and
// of the quota/get calls.
func recCount(emu *wechattest.Server) (ok, daily, reads int) {
	for _, r := range emu.Requests() {
		switch {
		case r.Path == "/cgi-bin/openapi/quota/get":
			reads++
		case r.Path == recAPI && r.Code == 0:
			ok++
		case r.Path == recAPI && r.Code == wechattest.CodeDailyQuota:
			daily++
		}
	}
	return ok, daily, reads
}

// beforeFirstRead is how many of recAPI's calls reached the emulator before
// the first quota/get: the day's first reading counts them once more (it
// cannot tell which WeChat has not counted yet), so the fleet ends that
// many short of the quota, by design.
func beforeFirstRead(emu *wechattest.Server) int {
	n := 0
	for _, r := range emu.Requests() { // in arrival order
		if r.Path == "/cgi-bin/openapi/quota/get" {
			return n
		}
		if r.Path == recAPI {
			n++
		}
	}
	return n
}

// recSlack is what a run may fall short of the quota beyond the calls
// counted twice by the first reading: those in flight when it was read.
const recSlack = 8

// maxReads bounds the quota/get calls of a run: one per Every for the
// fleet (the lease), plus the first at start and one per replica whose
// lease read raced an expiry.
const maxReads = int(recRun/recEvery) + 1 + recReplicas

// 40% of the day's quota spent by another client before the start: the
// fleet ends the day at the quota (within the calls booked before the
// first reading, counted as unseen) with no 45009.
func TestReconcileSpentByAnotherClient(t *testing.T) {
	const quota, spent = 200, 80
	emu, _, tl := recRunFleet(t, true, quota, quota, spent, 150) // 450 calls for 120 left
	ok, daily, reads := recCount(emu)
	t.Logf("quota %d, %d spent elsewhere: %d ok, %d x 45009, %d quota/get reads; callers: %+v", quota, spent, ok, daily, reads, tl)
	if daily != 0 || tl.Quota != 0 {
		t.Errorf("%d x 45009 at the emulator, %d quota errors seen by callers; want 0", daily, tl.Quota)
	}
	twice := beforeFirstRead(emu)
	if ok > quota-spent || ok < quota-spent-twice-recSlack {
		t.Errorf("%d calls succeeded, want the %d left of the quota (less the %d calls before the first reading, counted twice, and %d in flight)",
			ok, quota-spent, twice, recSlack)
	}
	if reads == 0 || reads > maxReads {
		t.Errorf("%d quota/get reads, want 1..%d", reads, maxReads)
	}
}

// Without Reconcile the fleet spends the quota another client used: the
// emulator answers 45009 (the failure the option mends).
func TestReconcileOffSpendsPastTheQuota(t *testing.T) {
	const quota, spent = 200, 80
	emu, _, _ := recRunFleet(t, false, quota, quota, spent, 150)
	ok, daily, reads := recCount(emu)
	t.Logf("without Reconcile: %d ok, %d x 45009, %d reads", ok, daily, reads)
	if daily == 0 || reads != 0 {
		t.Errorf("%d x 45009 and %d reads without Reconcile; want some 45009 and no reads", daily, reads)
	}
}

// A quota WeChat raised above the preset's is used: the fleet goes past the
// preset's 100 up to WeChat's 250, with no 45009.
func TestReconcileRaisedQuotaIsUsed(t *testing.T) {
	const preset, raised = 100, 250
	emu, _, tl := recRunFleet(t, true, preset, raised, 0, 200) // 600 calls for 250
	ok, daily, reads := recCount(emu)
	t.Logf("preset %d, WeChat %d: %d ok, %d x 45009, %d reads; callers: %+v", preset, raised, ok, daily, reads, tl)
	if daily != 0 {
		t.Errorf("%d x 45009, want 0", daily)
	}
	twice := beforeFirstRead(emu)
	if ok <= preset || ok < raised-twice-recSlack {
		t.Errorf("%d calls succeeded, want past the preset's %d up to WeChat's %d (less the %d calls before the first reading, counted twice, and %d in flight)",
			ok, preset, raised, twice, recSlack)
	}
}

// warnCounter counts the WARN lines about quotas.
type warnCounter struct {
	slog.Handler
	n *atomic.Int64
}

func (c warnCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn && strings.Contains(r.Message, "quota") {
		c.n.Add(1)
	}
	return nil
}

func (warnCounter) Enabled(context.Context, slog.Level) bool { return true }

// An account that made one call and went idle is read no more once
// idleReadings periods pass without a request naming it: its token expires
// (here after a second), and every reading used to fail, with a WARN each,
// for as long as the process ran. A failing reading is said once.
func TestIdleAccountIsNoLongerRead(t *testing.T) {
	if testing.Short() {
		t.Skip("seconds of idle time: make test runs it, make test-short does not")
	}
	const every = time.Second
	emu := wechattest.NewServer(wechattest.Options{Limits: wechattest.Limits{Daily: map[string]int{recAPI: 1000}}, TokenTTL: every})
	t.Cleanup(emu.Close)
	u, _ := url.Parse(emu.URL)
	var warns atomic.Int64
	app := "wx" + limitertest.Group(t)
	cfg := wechat.Config{Hosts: []string{u.Hostname()}, Reconcile: true, ReconcileEvery: every, Apps: []wechat.App{{AppID: app}}}
	client := loadtest.Replicas(t, 1, throttle.WithProfiles(wechat.MustNew(cfg).Profile()),
		throttle.WithLogger(slog.New(warnCounter{slog.DiscardHandler, &warns})))[0]
	req, _ := http.NewRequest(http.MethodPost, emu.URL+recAPI+"?access_token="+emu.Token(app),
		strings.NewReader(`{"touser":"o6_bmjrPTlm6_2sgVt7hMZOPfL2M","msgtype":"text","text":{"content":"hi"}}`))
	if r := loadtest.Send(client, req, "errcode"); r.Err != nil || r.Code != 0 {
		t.Fatalf("the call: %+v", r)
	}
	called := time.Now()
	reads := func() (n, failed int) {
		for _, r := range emu.Requests() {
			if r.Path == wechattest.QuotaGetPath {
				n++
				if r.Code != 0 {
					failed++
				}
			}
		}
		return n, failed
	}
	time.Sleep(6*every - time.Since(called)) // the span observed: what is read in it
	n, failed := reads()
	t.Logf("one call, then %v idle: %d readings (%d failed: the token expired), %d WARN lines", 6*every, n, failed, warns.Load())
	// The first reading at once, one a period while the account counts as
	// used (idleReadings of them), and no more.
	if n > 1+2 || warns.Load() > 1 {
		t.Fatalf("%d readings and %d WARN lines in %v of idleness, want at most 3 and 1", n, warns.Load(), 6*every)
	}
}
