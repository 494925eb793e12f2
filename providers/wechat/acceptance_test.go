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
	cfg.Apps[0].AppID, cfg.Hosts = app, []string{u.Hostname()}
	profile := wechat.MustNew(cfg).Profile()
	f.clients = loadtest.Replicas(t, accReplicas, throttle.WithProfiles(profile))
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
	cfg := wechat.Config{TimeScale: accTimeScale, Apps: []wechat.App{{NoDefaultQuotas: true, PerMinute: map[string]int{}}}}
	for _, a := range accAPIs {
		cfg.Apps[0].PerMinute[a.path] = emuPerMinute
	}
	f := newAccFleet(t, cfg, emuPerMinute)

	run := loadtest.Fire(accReplicas, accRun, slices.Repeat([]float64{accDemand * accRate}, len(accAPIs)), f.call)
	t.Logf("%d replicas, %v, demand %.0f calls/s per API (%d× the limit), latency 0-%v",
		accReplicas, accRun, accDemand*accRate, accDemand, accLatency)
	t.Logf("preset: %d per minute scaled to %v, + %v per API (%.2f/s); emulator: %d per emulated minute of %v per API (%.0f/s)",
		emuPerMinute, time.Minute/accTimeScale, cfg.Jitter, float64(emuPerMinute)/(time.Minute/accTimeScale+cfg.Jitter).Seconds(),
		emuPerMinute, time.Minute/accTimeScale, accRate)
	run.ExpectClean(t, loadtest.Answers(f.emu.Counters()), isQuotaCode)
	for _, a := range accAPIs {
		run.ExpectShare(t, a.path, f.successes(a.path), accRate, time.Minute, emuPerMinute)
	}
}

// successes are the emulator's record of the successful calls of one API.
func (f *accFleet) successes(api string) []loadtest.Arrival {
	var out []loadtest.Arrival
	for _, r := range f.emu.Requests() {
		if r.API == api && r.Code == 0 && r.Status == http.StatusOK {
			out = append(out, loadtest.Arrival{At: r.At, Emulated: r.Emulated})
		}
	}
	return out
}

// Four replicas on one Redis call one API for users of eight ID shapes,
// five times its limit in all with at least five callers per ID in flight:
// the IDs never make the API many, so the emulator rejects nothing and the
// API gets at least 90% of its rate.
func TestAcceptanceIDsOfEveryShapeAreOneAPI(t *testing.T) {
	// Twice the other run's limit: enough callers wait within the 2 s
	// budget to keep five per ID in flight.
	const api, perMinute = "/cgi-bin/user/info", 2 * accPerMinute
	const rate = float64(perMinute) / 60
	// The preset's windows run as fast as the emulator's (see the run above).
	emuPerMinute := perMinute / accTimeScale
	cfg := wechat.Config{TimeScale: accTimeScale, Apps: []wechat.App{{NoDefaultQuotas: true, PerMinute: map[string]int{api: emuPerMinute}}}}
	f := newAccFleet(t, cfg, emuPerMinute)
	var inFlight loadtest.Concurrency
	ids := loadtest.IDs
	call := func(ctx context.Context, i, id int) loadtest.Result {
		defer inFlight.Enter(ids[id])()
		target := f.emu.URL + api + "?access_token=" + f.token + "&openid=" + url.QueryEscape(ids[id]) + "&lang=zh_CN"
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
		return loadtest.Send(f.clients[i], req, "errcode")
	}
	run := loadtest.Fire(accReplicas, accRun, slices.Repeat([]float64{accDemand * rate / float64(len(ids))}, len(ids)), call)
	t.Logf("%d replicas, %v, %d IDs, demand %.0f calls/s in all (%d× the limit)", accReplicas, accRun, len(ids), accDemand*rate, accDemand)
	run.ExpectClean(t, loadtest.Answers(f.emu.Counters()), isQuotaCode)
	run.ExpectShare(t, api, f.successes(api), rate, time.Minute, emuPerMinute)
	inFlight.ExpectAtLeast(t, 5)
}
