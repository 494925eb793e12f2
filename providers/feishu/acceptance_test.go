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
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter/limitertest"
	"github.com/quotaware/throttle/providers/feishu"
	"github.com/quotaware/throttle/providers/feishu/feishutest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	redistest.StopShared()
	os.Exit(code)
}

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

	mu      sync.Mutex
	results []accResult
}

// accResult is one call as its caller saw it.
type accResult struct {
	code int   // the code of the answer; 0 for a success
	err  error // the Transport's error, when no answer came back
}

func newAccFleet(t *testing.T, cfg feishu.Config, emuOpts feishutest.Options) *accFleet {
	t.Helper()
	rdb := redistest.Shared(t)
	app := "cli_" + limitertest.Group(t)
	emuOpts.LatencyMax = accLatency
	emu := feishutest.NewServer(emuOpts)
	t.Cleanup(emu.Close)
	f := &accFleet{emu: emu, token: emu.Token(app)}
	u, _ := url.Parse(emu.URL)
	cfg.AppID, cfg.Hosts = app, []string{u.Hostname()}
	profile := feishu.MustProfile(cfg)
	prefix := limitertest.Group(t)
	quiet := slog.New(slog.DiscardHandler)
	for range accReplicas {
		// Each replica is its own process: its own connection pool and its
		// own Redis client.
		base := &http.Transport{MaxIdleConnsPerHost: 256}
		tr := throttle.New(
			throttle.WithRedis(rdb.Client(t)), throttle.WithRedisPrefix(prefix),
			throttle.WithProfiles(profile), throttle.WithBase(base),
			throttle.WithMaxWait(2*time.Second), throttle.WithLogger(quiet), throttle.WithoutTelemetry())
		t.Cleanup(func() {
			tr.Close()
			base.CloseIdleConnections()
		})
		f.clients = append(f.clients, &http.Client{Transport: tr})
	}
	return f
}

// call sends one request from replica i, as an SDK would.
func (f *accFleet) call(ctx context.Context, i int, method, path string) accResult {
	target := f.emu.URL + path
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
	var r accResult
	resp, err := f.clients[i].Do(req)
	if err != nil {
		r.err = err
		return r
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var v struct {
		Code int `json:"code"`
	}
	if json.Unmarshal(raw, &v) != nil || (v.Code == 0 && resp.StatusCode != http.StatusOK) {
		v.Code = -resp.StatusCode
	}
	r.code = v.Code
	return r
}

// drive fires calls from every replica until ctx ends, rates[i] calls per
// second to accAPIs[i] in total, each call on its own goroutine with Poisson
// arrivals. It returns when every call has finished; calls still waiting for
// a slot when ctx ends are cancelled, which gives their slots back.
func (f *accFleet) drive(ctx context.Context, rates []float64) {
	var wg sync.WaitGroup
	for i := range f.clients {
		for j, a := range accAPIs {
			method, _, _ := strings.Cut(a.pattern, " ")
			perReplica := rates[j] / float64(len(f.clients))
			wg.Add(1)
			go func() {
				defer wg.Done()
				var calls sync.WaitGroup
				defer calls.Wait()
				timer := time.NewTimer(0)
				defer timer.Stop()
				for {
					select {
					case <-ctx.Done():
						return
					case <-timer.C:
					}
					timer.Reset(time.Duration(rand.ExpFloat64() / perReplica * float64(time.Second)))
					calls.Add(1)
					go func() {
						defer calls.Done()
						r := f.call(ctx, i, method, a.path)
						f.mu.Lock()
						f.results = append(f.results, r)
						f.mu.Unlock()
					}()
				}
			}()
		}
	}
	wg.Wait()
}

// accTally counts the callers' results.
type accTally struct {
	calls, ok, quota, otherAnswers, throttled, penalized, cancelled, failed int
	firstFailure                                                            error
}

func (f *accFleet) tally() accTally {
	f.mu.Lock()
	defer f.mu.Unlock()
	var t accTally
	for _, r := range f.results {
		t.calls++
		switch {
		case r.err == nil && r.code == 0:
			t.ok++
		case r.err == nil && isQuotaCode(r.code):
			t.quota++
		case r.err == nil:
			t.otherAnswers++
		case errors.Is(r.err, throttle.ErrThrottled):
			t.throttled++
		case errors.Is(r.err, throttle.ErrPenalized):
			t.penalized++
		case errors.Is(r.err, context.Canceled):
			t.cancelled++
		default:
			t.failed++
			if t.firstFailure == nil {
				t.firstFailure = r.err
			}
		}
	}
	return t
}

func isQuotaCode(code int) bool {
	return code == feishutest.CodeFrequency || code == feishutest.CodeMonthlyQuota || code == feishutest.CodeChatFrequency ||
		code == -http.StatusTooManyRequests
}

// busiestSecond is the most arrivals in one wall-clock second: what the
// emulator counts against a per-second cap.
func busiestSecond(recs []feishutest.Request) int {
	n := map[time.Time]int{}
	most := 0
	for _, r := range recs {
		s := r.Emulated.Truncate(time.Second)
		n[s]++
		most = max(most, n[s])
	}
	return most
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
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	time.AfterFunc(accRun, cancel) // cancelled, as a service shutting down would
	f.drive(ctx, demand)

	recs := f.emu.Requests()
	cs := f.emu.Counters()
	tl := f.tally()
	t.Logf("%d replicas, %v, demand %d× each API's per-second cap, latency 0-%v", accReplicas, accRun, accDemand, accLatency)
	t.Logf("callers: %d calls, %d ok, %d quota errors, %d other error answers, %d throttled locally, %d penalized, %d cancelled at the end, %d failed",
		tl.calls, tl.ok, tl.quota, tl.otherAnswers, tl.throttled, tl.penalized, tl.cancelled, tl.failed)
	t.Logf("emulator: %d requests, %d ok, error answers by code %v", cs.Total, cs.OK, cs.ByCode)

	if cs.Total != cs.OK {
		t.Errorf("the emulator gave %d error answers (by code %v), want none", cs.Total-cs.OK, cs.ByCode)
	}
	if tl.quota != 0 || tl.penalized != 0 || tl.otherAnswers != 0 || tl.failed != 0 {
		t.Errorf("callers saw %d quota errors, %d penalized, %d other error answers, %d failures (first: %v): want none",
			tl.quota, tl.penalized, tl.otherAnswers, tl.failed, tl.firstFailure)
	}
	for i, a := range accAPIs {
		var got []feishutest.Request
		var times []time.Time
		for _, r := range recs {
			if r.Path == a.pattern && r.Code == 0 && r.Status == http.StatusOK && !r.At.Before(start) && r.At.Before(end) {
				got = append(got, r)
				times = append(times, r.At)
			}
		}
		sort.Slice(times, func(i, j int) bool { return times[i].Before(times[j]) })
		rate := float64(len(got)) / accRun.Seconds()
		sustained := 0.0
		if len(times) > 1 {
			sustained = float64(len(times)-1) / times[len(times)-1].Sub(times[0]).Seconds()
		}
		lv := levels[a.level]
		t.Logf("%s (level %d: preset %d per %v, emulator %d per wall-clock second)",
			a.pattern, a.level, lv.PerSecond, time.Second+feishu.DefaultJitter, emuLevels[a.level].PerSecond)
		t.Logf("    %4d successes in %v: %.2f/s = %.1f%% of the published %.0f/s (sustained %.2f/s); busiest wall-clock second %d of %.0f",
			len(got), accRun, rate, 100*rate/published[i], published[i], sustained, busiestSecond(got), published[i])
		if rate < 0.9*published[i] {
			t.Errorf("%s: %.2f calls/s succeeded, want at least 90%% of %.0f/s", a.pattern, rate, published[i])
		}
	}
}
