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
	cfg.CorpID, cfg.Hosts = corp, []string{u.Hostname()}
	profile := wecom.MustProfile(cfg)
	f.clients = loadtest.Replicas(t, accReplicas, throttle.WithProfiles(profile), loadtest.PatientFallback())
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
	cfg := wecom.Config{
		CorpPerMinute: emuPerMinute,
		CorpPerHour:   wecom.DefaultCorpPerHour / accTimeScale,
		IPPerMinute:   wecom.DefaultIPPerMinute / accTimeScale,
		IPPerHour:     wecom.DefaultIPPerHour / accTimeScale,
		TimeScale:     accTimeScale,
	}
	emuLimits := wecomtest.Limits{
		CorpPerMinute: cfg.CorpPerMinute,
		CorpPerHour:   cfg.CorpPerHour,
		IPPerMinute:   cfg.IPPerMinute,
		IPPerHour:     cfg.IPPerHour,
	}
	f := newAccFleet(t, cfg, emuLimits)

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
	t.Logf("preset per API: company %d/min and %d/h, IP %d/min and %d/h, windows scaled 1/%d, each + %v (%.2f/s); emulator per API: %+v per emulated minute/hour of %v/%v (%.0f/s)",
		cfg.CorpPerMinute, cfg.CorpPerHour, cfg.IPPerMinute, cfg.IPPerHour, accTimeScale, cfg.Jitter,
		float64(cfg.CorpPerMinute)/(time.Minute/accTimeScale+cfg.Jitter).Seconds(),
		emuLimits, time.Minute/accTimeScale, time.Hour/accTimeScale, accRate)
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
