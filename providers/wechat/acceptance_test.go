package wechat_test

// Acceptance test of the WeChat preset in the Transport: four replicas, each
// its own Transport and go-redis client, share one real redis-server and call
// the WeChat emulator (jittered latency) at five times the per-minute limit of
// two APIs. Every figure is read from the emulator's own record of arrivals,
// never from the callers' view.
//
// WeChat counts per-minute limits in calendar minutes, which a ten-second run
// could never fill, so the emulator runs accTimeScale times faster than the
// wall clock (an emulated minute lasts five seconds) and holds each API to
// accPerMinute/accTimeScale calls per emulated minute: the same rate as
// accPerMinute per real minute. The preset runs its minutes as fast
// (Config.TimeScale) with the emulator's limit, and keeps the default 50 ms
// Jitter: latency does not run faster.

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/internal/loadtest"
	"github.com/quotaware/throttle/limiter/limitertest"
	"github.com/quotaware/throttle/providers/wechat"
	"github.com/quotaware/throttle/providers/wechat/wechattest"
)

func TestMain(m *testing.M) { loadtest.Main(m) }

// The load of the acceptance run.
const (
	accReplicas  = 4
	accRun       = 10 * time.Second
	accDemand    = 5                     // calls fired per API, as a multiple of its rate
	accLatency   = 20 * time.Millisecond // the emulator's latency varies in [0, accLatency]
	accTimeScale = 12                    // an emulated minute lasts 5 s
	accPerMinute = 600                   // the preset's limit per real minute: 10/s
)

// The two APIs of the run, each with its own per-minute limit.
var accAPIs = []struct{ method, path string }{
	{http.MethodGet, "/cgi-bin/user/info"},
	{http.MethodPost, "/cgi-bin/message/custom/send"},
}

// accRate is the published rate of the binding limit, in calls per second.
const accRate = float64(accPerMinute) / 60

// accFleet is accReplicas replicas of a service calling one emulator
// through the preset.
type accFleet struct {
	emu     *wechattest.Server
	token   string
	clients []*http.Client
}

func newAccFleet(t *testing.T, cfg wechat.Config, emuPerMinute int) *accFleet {
	t.Helper()
	app := "wx" + limitertest.Group(t)
	emuLimits := wechattest.Limits{PerMinute: map[string]int{}}
	for _, a := range accAPIs {
		emuLimits.PerMinute[a.path] = emuPerMinute
	}
	emu := wechattest.NewServer(wechattest.Options{
		Limits:     emuLimits,
		TimeScale:  accTimeScale,
		LatencyMax: accLatency,
	})
	t.Cleanup(emu.Close)
	f := &accFleet{emu: emu, token: emu.Token(app)}
	u, _ := url.Parse(emu.URL)
	cfg.AppID, cfg.Hosts = app, []string{u.Hostname()}
	profile := wechat.MustProfile(cfg)
	f.clients = loadtest.Replicas(t, accReplicas, throttle.WithProfiles(profile), loadtest.PatientFallback())
	return f
}

// call sends one request to accAPIs[api] from replica i, as an SDK would.
func (f *accFleet) call(ctx context.Context, i, api int) loadtest.Result {
	a := accAPIs[api]
	target := f.emu.URL + a.path + "?access_token=" + f.token
	var body io.Reader
	if a.method == http.MethodPost {
		body = strings.NewReader(`{"touser":"o6_bmjrPTlm6_2sgVt7hMZOPfL2M","msgtype":"text","text":{"content":"hi"}}`)
	} else {
		target += "&openid=o6_bmjrPTlm6_2sgVt7hMZOPfL2M&lang=zh_CN"
	}
	req, _ := http.NewRequestWithContext(ctx, a.method, target, body)
	return loadtest.Send(f.clients[i], req, "errcode")
}

func isQuotaCode(code int) bool {
	return code == wechattest.CodeDailyQuota || code == wechattest.CodeMinuteQuota || code == wechattest.CodeMiniFrequency
}

// Four replicas on one Redis, five times the per-minute limit on two APIs
// for ten seconds: the emulator rejects nothing, the callers see no quota
// error, and each API gets at least 90% of its rate.
func TestAcceptanceFourReplicasAtFiveTimesDemand(t *testing.T) {
	// The preset's minutes run accTimeScale times faster too, with the
	// emulator's limit.
	emuPerMinute := accPerMinute / accTimeScale
	cfg := wechat.Config{
		Daily:     map[string]int{}, // only the per-minute limit under test
		PerMinute: map[string]int{},
		TimeScale: accTimeScale,
	}
	for _, a := range accAPIs {
		cfg.PerMinute[a.path] = emuPerMinute
	}
	f := newAccFleet(t, cfg, emuPerMinute)

	start := time.Now()
	end := start.Add(accRun)
	ctx, cancel := loadtest.Until(end)
	defer cancel()
	results := loadtest.Drive(ctx, accReplicas, slices.Repeat([]float64{accDemand * accRate}, len(accAPIs)), f.call)

	recs := f.emu.Requests()
	cs := f.emu.Counters()
	tl := loadtest.Count(results, isQuotaCode)
	t.Logf("%d replicas, %v, demand %.0f calls/s per API (%d× the limit), latency 0-%v",
		accReplicas, accRun, accDemand*accRate, accDemand, accLatency)
	t.Logf("preset: %d per minute scaled to %v, + %v per API (%.2f/s); emulator: %d per emulated minute of %v per API (%.0f/s)",
		emuPerMinute, time.Minute/accTimeScale, cfg.Jitter, float64(emuPerMinute)/(time.Minute/accTimeScale+cfg.Jitter).Seconds(),
		emuPerMinute, time.Minute/accTimeScale, accRate)
	t.Logf("callers: %v", tl)
	t.Logf("emulator: %d requests, %d ok, error answers by code %v", cs.Total, cs.OK, cs.ByCode)

	if cs.Total != cs.OK {
		t.Errorf("the emulator gave %d error answers (by code %v), want none", cs.Total-cs.OK, cs.ByCode)
	}
	tl.ExpectClean(t)
	for _, a := range accAPIs {
		var at, emulated []time.Time
		for _, r := range recs {
			if r.Path == a.path && r.Code == 0 && r.Status == http.StatusOK && !r.At.Before(start) && r.At.Before(end) {
				at = append(at, r.At)
				emulated = append(emulated, r.Emulated)
			}
		}
		got := loadtest.Measure(at, accRun)
		t.Logf("%-30s %4d successes in %v: %.2f/s = %.1f%% of %.0f/s (sustained %.2f/s); busiest emulated minute %d of %d",
			a.path, got.N, accRun, got.Rate, 100*got.Rate/accRate, accRate, got.Sustained, loadtest.Busiest(emulated, time.Minute), emuPerMinute)
		got.Expect(t, a.path, accRate)
	}
}
