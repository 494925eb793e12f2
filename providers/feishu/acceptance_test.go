package feishu_test

// Acceptance test of the Feishu preset in the Transport: four replicas, each
// its own Transport and go-redis client, share one real redis-server and call
// the Feishu emulator (jittered latency) at five times the per-second cap of
// two APIs of different frequency levels (the documented level table, in
// both the preset and the emulator, which counts wall-clock seconds). Every
// figure is read from the emulator's own record of arrivals, never from the
// callers' view.

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/internal/loadtest"
	"github.com/quotaware/throttle/limiter/limitertest"
	"github.com/quotaware/throttle/providers/feishu"
	"github.com/quotaware/throttle/providers/feishu/feishutest"
)

func TestMain(m *testing.M) { loadtest.Main(m) }

// The load of the acceptance run.
const (
	accReplicas = 4
	accRun      = 10 * time.Second
	accDemand   = 5                     // calls fired per API, as a multiple of its rate
	accLatency  = 20 * time.Millisecond // the emulator's latency varies in [0, accLatency]
)

// The two APIs of the run: pattern is how the preset and the emulator name
// the API, path what a call sends, level its frequency level.
var accAPIs = []struct {
	pattern, path string
	level         int
}{
	{"GET /open-apis/contact/v3/users/:user_id", "/open-apis/contact/v3/users/ou_7d8a6e6df7621556ce0d21922b676706ccs", 8}, // 20/s
	{"POST /open-apis/im/v1/chats", "/open-apis/im/v1/chats", 6},                                                          // 5/s
}

// accFleet is accReplicas replicas of a service calling one emulator
// through the preset.
type accFleet struct {
	emu     *feishutest.Server
	token   string
	clients []*http.Client
}

func newAccFleet(t *testing.T, cfg feishu.Config, emuOpts feishutest.Options) *accFleet {
	t.Helper()
	app := "cli_" + limitertest.Group(t)
	emuOpts.LatencyMax = accLatency
	emu := feishutest.NewServer(emuOpts)
	t.Cleanup(emu.Close)
	f := &accFleet{emu: emu, token: emu.Token(app)}
	u, _ := url.Parse(emu.URL)
	cfg.AppID, cfg.Hosts = app, []string{u.Hostname()}
	profile := feishu.MustProfile(cfg)
	f.clients = loadtest.Replicas(t, accReplicas, throttle.WithProfiles(profile))
	return f
}

// call sends one request to accAPIs[api] from replica i, as an SDK would.
func (f *accFleet) call(ctx context.Context, i, api int) loadtest.Result {
	method, _, _ := strings.Cut(accAPIs[api].pattern, " ")
	target := f.emu.URL + accAPIs[api].path
	var body io.Reader
	if method == http.MethodPost {
		body = strings.NewReader(`{"name":"release","chat_mode":"group","chat_type":"private"}`)
		target += "?user_id_type=open_id"
	} else {
		target += "?user_id_type=open_id&department_id_type=open_department_id"
	}
	req, _ := http.NewRequestWithContext(ctx, method, target, body)
	req.Header.Set("Authorization", "Bearer "+f.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json; charset=utf-8")
	}
	return loadtest.Send(f.clients[i], req, "code")
}

func isQuotaCode(code int) bool {
	return code == feishutest.CodeFrequency || code == feishutest.CodeMonthlyQuota || code == feishutest.CodeChatFrequency ||
		code == -http.StatusTooManyRequests
}

// Four replicas on one Redis, five times the per-second cap on two APIs for
// ten seconds: the emulator rejects nothing, the callers see no quota error,
// and each API gets at least 90% of its published rate.
func TestAcceptanceFourReplicasAtFiveTimesDemand(t *testing.T) {
	levels, emuLevels := feishu.LevelTable(), feishutest.LevelTable()
	cfg := feishu.Config{Levels: levels, APIs: map[string]int{}}
	emuOpts := feishutest.Options{Levels: emuLevels, APIs: map[string]int{}}
	published := make([]float64, len(accAPIs))
	demand := make([]float64, len(accAPIs))
	for i, a := range accAPIs {
		cfg.APIs[a.pattern] = a.level
		emuOpts.APIs[a.pattern] = a.level
		published[i] = float64(emuLevels[a.level].PerSecond)
		demand[i] = accDemand * published[i]
	}
	f := newAccFleet(t, cfg, emuOpts)

	start := time.Now()
	end := start.Add(accRun)
	ctx, cancel := loadtest.Until(end)
	defer cancel()
	results := loadtest.Drive(ctx, accReplicas, demand, f.call)

	recs := f.emu.Requests()
	cs := f.emu.Counters()
	tl := loadtest.Count(results, isQuotaCode)
	t.Logf("%d replicas, %v, demand %d× each API's per-second cap, latency 0-%v", accReplicas, accRun, accDemand, accLatency)
	t.Logf("callers: %v", tl)
	t.Logf("emulator: %d requests, %d ok, error answers by code %v", cs.Total, cs.OK, cs.ByCode)

	if cs.Total != cs.OK {
		t.Errorf("the emulator gave %d error answers (by code %v), want none", cs.Total-cs.OK, cs.ByCode)
	}
	tl.ExpectClean(t)
	for i, a := range accAPIs {
		var at, emulated []time.Time
		for _, r := range recs {
			if r.Path == a.pattern && r.Code == 0 && r.Status == http.StatusOK && !r.At.Before(start) && r.At.Before(end) {
				at = append(at, r.At)
				emulated = append(emulated, r.Emulated)
			}
		}
		got := loadtest.Measure(at, accRun)
		lv := levels[a.level]
		t.Logf("%s (level %d: preset %d per %v, emulator %d per wall-clock second)",
			a.pattern, a.level, lv.PerSecond, time.Second+feishu.DefaultJitter, emuLevels[a.level].PerSecond)
		t.Logf("    %4d successes in %v: %.2f/s = %.1f%% of the published %.0f/s (sustained %.2f/s); busiest wall-clock second %d of %.0f",
			got.N, accRun, got.Rate, 100*got.Rate/published[i], published[i], got.Sustained, loadtest.Busiest(emulated, time.Second), published[i])
		got.Expect(t, a.pattern, published[i])
	}
}
