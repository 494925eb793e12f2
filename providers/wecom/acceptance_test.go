package wecom_test

// Acceptance test of the WeCom preset in the Transport: four replicas, each
// its own Transport and go-redis client, share one real redis-server and call
// the WeCom emulator (jittered latency) at five times the company's
// per-minute limit of two APIs. Every figure is read from the emulator's own
// record of arrivals, never from the callers' view.
//
// WeCom counts its limits in calendar minutes and hours, which a ten-second
// run could never fill, so the emulator runs accTimeScale times faster than
// the wall clock (an emulated minute lasts five seconds) and holds every
// limit at 1/accTimeScale of the documented one: the same rates. The
// company's per-minute limit is scaled down to accPerMinute so that it
// binds; the hour and egress IP limits stay clear. The preset runs its
// windows as fast (Config.TimeScale) with the emulator's limits, and keeps
// the default 50 ms Jitter: latency does not run faster.

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
	"github.com/quotaware/throttle/providers/wecom"
	"github.com/quotaware/throttle/providers/wecom/wecomtest"
)

func TestMain(m *testing.M) { loadtest.Main(m) }

// The load of the acceptance run.
const (
	accReplicas  = 4
	accRun       = 10 * time.Second
	accDemand    = 5                     // calls fired per API, as a multiple of its rate
	accLatency   = 20 * time.Millisecond // the emulator's latency varies in [0, accLatency]
	accTimeScale = 12                    // an emulated minute lasts 5 s
	accPerMinute = 600                   // the company's limit per API per real minute: 10/s
)

// The two APIs of the run, each with its own limits.
var accAPIs = []struct{ method, path string }{
	{http.MethodGet, "/cgi-bin/user/get"},
	{http.MethodPost, "/cgi-bin/message/send"},
}

// accRate is the published rate of the binding limit, in calls per second.
const accRate = float64(accPerMinute) / 60

// accFleet is accReplicas replicas of a service calling one emulator
// through the preset.
type accFleet struct {
	emu     *wecomtest.Server
	token   string
	clients []*http.Client
}

func newAccFleet(t *testing.T, cfg wecom.Config, emuLimits wecomtest.Limits) *accFleet {
	t.Helper()
	corp := "ww" + limitertest.Group(t)
	emu := wecomtest.NewServer(wecomtest.Options{
		Limits:     emuLimits,
		TimeScale:  accTimeScale,
		LatencyMax: accLatency,
	})
	t.Cleanup(emu.Close)
	f := &accFleet{emu: emu, token: emu.Token(corp)}
	u, _ := url.Parse(emu.URL)
	cfg.Apps[0].CorpID, cfg.Hosts = corp, []string{u.Hostname()}
	profile := wecom.MustNew(cfg).Profile()
	f.clients = loadtest.Replicas(t, accReplicas, throttle.WithProfiles(profile))
	return f
}

// call sends one request to accAPIs[api] from replica i, as an SDK would.
func (f *accFleet) call(ctx context.Context, i, api int) loadtest.Result {
	a := accAPIs[api]
	target := f.emu.URL + a.path + "?access_token=" + f.token
	var body io.Reader
	if a.method == http.MethodPost {
		body = strings.NewReader(`{"touser":"zhangsan","msgtype":"text","agentid":1000002,"text":{"content":"hi"}}`)
	} else {
		target += "&userid=zhangsan"
	}
	req, _ := http.NewRequestWithContext(ctx, a.method, target, body)
	return loadtest.Send(f.clients[i], req, "errcode")
}

func isQuotaCode(code int) bool {
	return code == wecomtest.CodeFreq || code == wecomtest.CodeConcurrent
}

// Four replicas on one Redis, five times the company's per-minute limit on
// two APIs for ten seconds: the emulator rejects nothing, the callers see no
// quota error, and each API gets at least 90% of its rate.
func TestAcceptanceFourReplicasAtFiveTimesDemand(t *testing.T) {
	// The preset's windows run accTimeScale times faster too, with the
	// emulator's limits: its sliding windows may then let a minute's
	// allowance go at once, as they would against WeCom's real minutes.
	emuPerMinute := accPerMinute / accTimeScale
	cfg := wecom.Config{IPPerMinute: 20000 / accTimeScale, IPPerHour: 600000 / accTimeScale, TimeScale: accTimeScale, Apps: []wecom.App{{NoPerMemberLimit: true, CorpPerMinute: emuPerMinute, CorpPerHour: 150000 / accTimeScale}}}
	emuLimits := wecomtest.Limits{
		CorpPerMinute: cfg.Apps[0].CorpPerMinute,
		CorpPerHour:   cfg.Apps[0].CorpPerHour,
		IPPerMinute:   cfg.IPPerMinute,
		IPPerHour:     cfg.IPPerHour,
	}
	f := newAccFleet(t, cfg, emuLimits)

	run := loadtest.Fire(accReplicas, accRun, slices.Repeat([]float64{accDemand * accRate}, len(accAPIs)), f.call)
	t.Logf("%d replicas, %v, demand %.0f calls/s per API (%d× the limit), latency 0-%v",
		accReplicas, accRun, accDemand*accRate, accDemand, accLatency)
	t.Logf("preset per API: company %d/min and %d/h, IP %d/min and %d/h, windows scaled 1/%d, each + %v (%.2f/s); emulator per API: %+v per emulated minute/hour of %v/%v (%.0f/s)",
		cfg.Apps[0].CorpPerMinute, cfg.Apps[0].CorpPerHour, cfg.IPPerMinute, cfg.IPPerHour, accTimeScale, cfg.Jitter,
		float64(cfg.Apps[0].CorpPerMinute)/(time.Minute/accTimeScale+cfg.Jitter).Seconds(),
		emuLimits, time.Minute/accTimeScale, time.Hour/accTimeScale, accRate)
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

// Four replicas on one Redis call one API for members of eight ID shapes,
// five times the company's limit in all with at least five callers per ID
// in flight: the IDs never make the API many, so the emulator rejects
// nothing and the API gets at least 90% of its rate.
func TestAcceptanceIDsOfEveryShapeAreOneAPI(t *testing.T) {
	// Twice the other run's limit: enough callers wait within the 2 s
	// budget to keep five per ID in flight.
	const api, perMinute = "/cgi-bin/user/get", 2 * accPerMinute
	const rate = float64(perMinute) / 60
	// The preset's windows run as fast as the emulator's (see the run above).
	emuPerMinute := perMinute / accTimeScale
	cfg := wecom.Config{IPPerMinute: 20000 / accTimeScale, IPPerHour: 600000 / accTimeScale, TimeScale: accTimeScale, Apps: []wecom.App{{CorpPerMinute: emuPerMinute, CorpPerHour: 150000 / accTimeScale}}}
	f := newAccFleet(t, cfg, wecomtest.Limits{
		CorpPerMinute: cfg.Apps[0].CorpPerMinute, CorpPerHour: cfg.Apps[0].CorpPerHour,
		IPPerMinute: cfg.IPPerMinute, IPPerHour: cfg.IPPerHour,
	})
	var inFlight loadtest.Concurrency
	ids := loadtest.IDs
	call := func(ctx context.Context, i, id int) loadtest.Result {
		defer inFlight.Enter(ids[id])()
		target := f.emu.URL + api + "?access_token=" + f.token + "&userid=" + url.QueryEscape(ids[id])
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
		return loadtest.Send(f.clients[i], req, "errcode")
	}
	run := loadtest.Fire(accReplicas, accRun, slices.Repeat([]float64{accDemand * rate / float64(len(ids))}, len(ids)), call)
	t.Logf("%d replicas, %v, %d IDs, demand %.0f calls/s in all (%d× the limit)", accReplicas, accRun, len(ids), accDemand*rate, accDemand)
	run.ExpectClean(t, loadtest.Answers(f.emu.Counters()), isQuotaCode)
	run.ExpectShare(t, api, f.successes(api), rate, time.Minute, emuPerMinute)
	inFlight.ExpectAtLeast(t, 5)
}

// Four replicas send app messages to one member at five times WeCom's
// per-member limit (30 a minute; the emulator runs 12 times faster, so 6/s
// here): the emulator, which drops messages over a member's limit without
// an error as WeCom does, drops none, and the member gets at least 90% of
// its limit.
func TestAcceptanceOneMemberAtFiveTimesItsLimit(t *testing.T) {
	const perMinute, perHour = 30, 1000
	cfg := wecom.Config{Jitter: accTimeScale * (50 * time.Millisecond), Apps: []wecom.App{{PerMemberPerMinute: perMinute * accTimeScale, PerMemberPerHour: perHour * accTimeScale}}}
	def := wecomtest.DefaultLimits()
	f := newAccFleet(t, cfg, wecomtest.Limits{
		CorpPerMinute: def.CorpPerMinute / accTimeScale, CorpPerHour: def.CorpPerHour / accTimeScale,
		IPPerMinute: def.IPPerMinute / accTimeScale, IPPerHour: def.IPPerHour / accTimeScale,
		PerMemberPerMinute: perMinute, PerMemberPerHour: perHour,
	})
	rate := float64(perMinute*accTimeScale) / 60
	call := func(ctx context.Context, i, _ int) loadtest.Result {
		body := strings.NewReader(`{"touser":"zhangsan","msgtype":"text","agentid":1000002,"text":{"content":"build 1.4 is green"}}`)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.emu.URL+"/cgi-bin/message/send?access_token="+f.token, body)
		return loadtest.Send(f.clients[i], req, "errcode")
	}
	run := loadtest.Fire(accReplicas, accRun, []float64{accDemand * rate}, call)
	t.Logf("%d replicas, %v, %.0f messages/s to one member (%d× its limit of %d per emulated minute of %v)",
		accReplicas, accRun, accDemand*rate, accDemand, perMinute, time.Minute/accTimeScale)
	run.ExpectClean(t, loadtest.Answers(f.emu.Counters()), isQuotaCode)
	dropped := 0
	for _, r := range f.emu.Requests() {
		dropped += r.Dropped
	}
	if dropped != 0 {
		t.Errorf("the emulator dropped %d messages over the member's limit, want none", dropped)
	}
	run.ExpectShare(t, "/cgi-bin/message/send to zhangsan", f.successes("/cgi-bin/message/send"), rate, time.Minute, perMinute)
}
