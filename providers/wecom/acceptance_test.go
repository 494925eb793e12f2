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
// limit at 1/accTimeScale of the preset's: the same rates. The company's
// per-minute limit is scaled down to accPerMinute so that it binds; the hour
// and egress IP limits keep their documented values and stay clear. The
// preset's Jitter headroom is scaled alike (the default 50 ms per emulated
// minute), so it keeps the same margin against the jittered latency as it
// would against WeCom's real minutes.

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
	"github.com/quotaware/throttle/providers/wecom"
	"github.com/quotaware/throttle/providers/wecom/wecomtest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	redistest.StopShared()
	os.Exit(code)
}

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

	mu      sync.Mutex
	results []accResult
}

// accResult is one call as its caller saw it.
type accResult struct {
	code int   // the errcode of the answer; 0 for a success
	err  error // the Transport's error, when no answer came back
}

func newAccFleet(t *testing.T, cfg wecom.Config, emuLimits wecomtest.Limits) *accFleet {
	t.Helper()
	rdb := redistest.Shared(t)
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
	target := f.emu.URL + path + "?access_token=" + f.token
	var body io.Reader
	if method == http.MethodPost {
		body = strings.NewReader(`{"touser":"zhangsan","msgtype":"text","agentid":1000002,"text":{"content":"hi"}}`)
	} else {
		target += "&userid=zhangsan"
	}
	req, _ := http.NewRequestWithContext(ctx, method, target, body)
	var r accResult
	resp, err := f.clients[i].Do(req)
	if err != nil {
		r.err = err
		return r
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var v struct {
		Errcode int `json:"errcode"`
	}
	if json.Unmarshal(raw, &v) != nil || (v.Errcode == 0 && resp.StatusCode != http.StatusOK) {
		v.Errcode = -resp.StatusCode
	}
	r.code = v.Errcode
	return r
}

// drive fires calls from every replica until ctx ends, rate calls per
// second to each API in total, each call on its own goroutine with Poisson
// arrivals. It returns when every call has finished; calls still waiting for
// a slot when ctx ends are cancelled, which gives their slots back.
func (f *accFleet) drive(ctx context.Context, rate float64) {
	var wg sync.WaitGroup
	for i := range f.clients {
		for _, a := range accAPIs {
			perReplica := rate / float64(len(f.clients))
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
						r := f.call(ctx, i, a.method, a.path)
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
	return code == wecomtest.CodeFreq || code == wecomtest.CodeConcurrent
}

// busiestMinute is the most arrivals in one emulated calendar minute: what
// the emulator counts against the limit.
func busiestMinute(recs []wecomtest.Request) int {
	n := map[time.Time]int{}
	most := 0
	for _, r := range recs {
		m := r.Emulated.Truncate(time.Minute)
		n[m]++
		most = max(most, n[m])
	}
	return most
}

// Four replicas on one Redis, five times the company's per-minute limit on
// two APIs for ten seconds: the emulator rejects nothing, the callers see no
// quota error, and each API gets at least 90% of its rate.
func TestAcceptanceFourReplicasAtFiveTimesDemand(t *testing.T) {
	cfg := wecom.Config{
		CorpPerMinute: accPerMinute,
		CorpPerHour:   wecom.DefaultCorpPerHour,
		IPPerMinute:   wecom.DefaultIPPerMinute,
		IPPerHour:     wecom.DefaultIPPerHour,
		Jitter:        accTimeScale * wecom.DefaultJitter,
	}
	emuPerMinute := accPerMinute / accTimeScale
	emuLimits := wecomtest.Limits{
		CorpPerMinute: emuPerMinute,
		CorpPerHour:   cfg.CorpPerHour / accTimeScale,
		IPPerMinute:   cfg.IPPerMinute / accTimeScale,
		IPPerHour:     cfg.IPPerHour / accTimeScale,
	}
	f := newAccFleet(t, cfg, emuLimits)

	start := time.Now()
	end := start.Add(accRun)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	time.AfterFunc(accRun, cancel) // cancelled, as a service shutting down would
	f.drive(ctx, accDemand*accRate)

	recs := f.emu.Requests()
	cs := f.emu.Counters()
	tl := f.tally()
	t.Logf("%d replicas, %v, demand %.0f calls/s per API (%d× the limit), latency 0-%v",
		accReplicas, accRun, accDemand*accRate, accDemand, accLatency)
	t.Logf("preset per API: company %d/min and %d/h, IP %d/min and %d/h, each window + %v (%.2f/s); emulator per API: %+v per emulated minute/hour of %v/%v (%.0f/s)",
		cfg.CorpPerMinute, cfg.CorpPerHour, cfg.IPPerMinute, cfg.IPPerHour, cfg.Jitter,
		float64(cfg.CorpPerMinute)/(time.Minute+cfg.Jitter).Seconds(),
		emuLimits, time.Minute/accTimeScale, time.Hour/accTimeScale, accRate)
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
	for _, a := range accAPIs {
		var got []wecomtest.Request
		var times []time.Time
		for _, r := range recs {
			if r.Path == a.path && r.Code == 0 && r.Status == http.StatusOK && !r.At.Before(start) && r.At.Before(end) {
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
		t.Logf("%-30s %4d successes in %v: %.2f/s = %.1f%% of %.0f/s (sustained %.2f/s); busiest emulated minute %d of %d",
			a.path, len(got), accRun, rate, 100*rate/accRate, accRate, sustained, busiestMinute(got), emuPerMinute)
		if rate < 0.9*accRate {
			t.Errorf("%s: %.2f calls/s succeeded, want at least 90%% of %.0f/s", a.path, rate, accRate)
		}
	}
}
