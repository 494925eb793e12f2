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
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/internal/loadtest"
	"github.com/quotaware/throttle/limiter/limitertest"
	"github.com/quotaware/throttle/providers/feishu"
	"github.com/quotaware/throttle/providers/feishu/feishutest"
)

func TestMain(m *testing.M) { loadtest.Main(m) }

// perChat is Feishu's documented limit of messages per second to one chat,
// the preset's default.
const perChat = 5

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
	app     string
	token   string
	clients []*http.Client
}

func newAccFleet(t *testing.T, cfg feishu.Config, emuOpts feishutest.Options) *accFleet {
	t.Helper()
	app := "cli_" + limitertest.Group(t)
	emuOpts.LatencyMax = accLatency
	emu := feishutest.NewServer(emuOpts)
	t.Cleanup(emu.Close)
	f := &accFleet{emu: emu, app: app, token: emu.Token(app)}
	u, _ := url.Parse(emu.URL)
	cfg.Apps[0].AppID, cfg.Hosts = app, []string{u.Hostname()}
	profile := feishu.MustNew(cfg).Profile()
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

// publishedPerSecond are the per-second caps of the levels the runs use,
// as Feishu documents them.
var publishedPerSecond = map[int]float64{6: 5, 8: 20}

func isQuotaCode(code int) bool {
	return code == feishutest.CodeFrequency || code == feishutest.CodeMonthlyQuota || code == feishutest.CodeChatFrequency ||
		code == -http.StatusTooManyRequests
}

// Four replicas on one Redis, five times the per-second cap on two APIs for
// ten seconds: the emulator rejects nothing, the callers see no quota error,
// and each API gets at least 90% of its published rate. The preset measures
// its allowance from the answers' latency spread, which other packages'
// load widens (88% was seen beside them), so the test runs alone.
func TestAcceptanceFourReplicasAtFiveTimesDemand(t *testing.T) {
	loadtest.Alone(t)
	levels := feishu.LevelTable()
	cfg := feishu.Config{Apps: []feishu.App{{Levels: levels, APIs: map[string]int{}, NoDefaultAPIs: true}}}
	emuOpts := feishutest.Options{APIs: map[string]int{}} // the emulator's own level table
	published := make([]float64, len(accAPIs))
	demand := make([]float64, len(accAPIs))
	for i, a := range accAPIs {
		cfg.Apps[0].APIs[a.pattern] = a.level
		emuOpts.APIs[a.pattern] = a.level
		published[i] = publishedPerSecond[a.level]
		demand[i] = accDemand * published[i]
	}
	f := newAccFleet(t, cfg, emuOpts)

	run := loadtest.Fire(accReplicas, accRun, demand, f.call)
	t.Logf("%d replicas, %v, demand %d× each API's per-second cap, latency 0-%v", accReplicas, accRun, accDemand, accLatency)
	run.ExpectClean(t, loadtest.Answers(f.emu.Counters()), isQuotaCode)
	for i, a := range accAPIs {
		lv := levels[a.level]
		t.Logf("%s (level %d: preset %d per %v, emulator %d per wall-clock second)",
			a.pattern, a.level, lv.PerSecond, time.Second+(50*time.Millisecond), int(published[i]))
		run.ExpectShare(t, a.pattern, f.successes(a.pattern, ""), published[i], time.Second, int(published[i]))
	}
}

// successes are the emulator's record of the successful calls of one API
// (and, when chat is not empty, to one chat).
func (f *accFleet) successes(api, chat string) []loadtest.Arrival {
	var out []loadtest.Arrival
	for _, r := range f.emu.Requests() {
		if r.Path == api && (chat == "" || r.ReceiveID == chat) && r.Code == 0 && r.Status == http.StatusOK {
			out = append(out, loadtest.Arrival{At: r.At, Emulated: r.Emulated})
		}
	}
	return out
}

// Four replicas on one Redis read users of eight ID shapes through one API,
// five times its cap in all with at least five callers per ID in flight:
// the IDs never make the API many, so the emulator rejects nothing and the
// API gets at least 90% of its rate.
func TestAcceptanceIDsOfEveryShapeAreOneAPI(t *testing.T) {
	// A share of the rate under the measured allowance, which other
	// packages' load widens (76-80% seen beside them): run alone.
	loadtest.Alone(t)
	const api, level = "GET /open-apis/contact/v3/users/:user_id", 8 // 20/s
	f := newAccFleet(t, feishu.Config{Apps: []feishu.App{{APIs: map[string]int{api: level}}}}, feishutest.Options{APIs: map[string]int{api: level}})
	published := publishedPerSecond[level]
	var inFlight loadtest.Concurrency
	ids := loadtest.IDs
	call := func(ctx context.Context, i, id int) loadtest.Result {
		defer inFlight.Enter(ids[id])()
		target := f.emu.URL + "/open-apis/contact/v3/users/" + url.PathEscape(ids[id]) + "?user_id_type=user_id"
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
		req.Header.Set("Authorization", "Bearer "+f.token)
		return loadtest.Send(f.clients[i], req, "code")
	}
	run := loadtest.Fire(accReplicas, accRun, slices.Repeat([]float64{accDemand * published / float64(len(ids))}, len(ids)), call)
	t.Logf("%d replicas, %v, %d IDs, demand %.0f calls/s in all (%d× the cap)", accReplicas, accRun, len(ids), accDemand*published, accDemand)
	run.ExpectClean(t, loadtest.Answers(f.emu.Counters()), isQuotaCode)
	run.ExpectShare(t, api, f.successes(api, ""), published, time.Second, int(published))
	inFlight.ExpectAtLeast(t, 5)
}

// Four replicas send 25 messages/s to one chat (five times Feishu's 5/s per
// chat) while three other chats get 3/s each, all in the SDK's request
// shape (receive_id in the JSON body): the emulator rejects nothing, no
// caller sees a quota error or a penalty (a 230020 penalises that chat's
// scope, not the API), the busy chat gets at least 85% of its 5/s, and the
// other chats get their messages through (none refused locally in most
// runs; the test allows 5%, below).
//
// The last holds because the per-chat rule does not book ahead
// (rule.WithMaxBookAhead): a message held back by its chat is refused
// without charging the API's shared per-second and per-minute rules and
// asks again at the chat's slot. Booked ahead, it moved the shared rules'
// clocks to that slot and the other chats' messages queued behind the busy
// one (50-65% of them delivered).
func TestAcceptanceOneBusyChatLeavesTheOthersAlone(t *testing.T) {
	busyChatRun(t, []float64{5 * perChat, 3, 3, 3})
}

// Every chat under its limit (4, 3, 3 and 3 messages/s, 13/s against the
// shared 16.7/s): the 3/s chats get at least 95% delivered (all of them in
// most runs) and the 4/s chat at least 80% (its Poisson arrivals at 80% of the chat's rate queue
// past the 2 s budget now and then under any limiter: about 0.3% of its
// messages even in strict arrival order, in clusters: a simulation puts 5
// or more of a run's 40 past the budget in 1% of runs, 8 or more in 0.1%).
// Booking the shared rules at each chat's later slot delivered about 9.8/s
// of 13.
func TestAcceptanceChatsUnderTheirLimitAllDelivered(t *testing.T) {
	busyChatRun(t, []float64{4, 3, 3, 3})
}

// quietChat is the rate (messages/s) up to which a chat must get at least
// quietShare of its messages delivered: 60% of its limit. Its Poisson
// arrivals, with the shared rules at 78-84% of their rate, still queue past
// the 2 s budget now and then: the runs measured deliver all, but a loaded
// machine's late wakes can cost a message or two, so the test allows 5%
// (before the per-chat rule stopped booking ahead: 50-65% delivered).
const (
	quietChat  = 3
	quietShare = 0.95
)

// busyChatRun sends rates[i] messages/s to chat i from four replicas and
// checks the run: no rejection anywhere, at least quietShare of a quiet
// chat's messages delivered, at least 80% to a chat under its limit, and a chat over its
// limit at least 85% of that limit.
//
// Both tests measure deliveries against a 2 s budget, which late wakes on a
// loaded machine eat into (a CI run beside every other package refused 3 of
// a 3/s chat's 44 messages), so they run alone.
func busyChatRun(t *testing.T, rates []float64) {
	loadtest.Alone(t)
	f := newAccFleet(t, feishu.Config{Apps: []feishu.App{{}}}, feishutest.Options{})
	chats := []string{"oc_busy0a1b2c3d4e5f6a7b8c9d0e1f2a3", "oc_calm1", "oc_calm2", "ou_7d8a6e6df7621556ce0d21922b676706ccs"}
	byChat := make([][]loadtest.Result, len(chats))
	var mu sync.Mutex
	call := func(ctx context.Context, i, chat int) loadtest.Result {
		body := `{"receive_id":"` + chats[chat] + `","msg_type":"text","content":"{\"text\":\"release 1.4 is out\"}","uuid":""}`
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.emu.URL+"/open-apis/im/v1/messages?receive_id_type=chat_id", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+f.token)
		req.Header.Set("Content-Type", "application/json; charset=utf-8")
		r := loadtest.Send(f.clients[i], req, "code")
		mu.Lock()
		byChat[chat] = append(byChat[chat], r)
		mu.Unlock()
		return r
	}
	run := loadtest.Fire(accReplicas, accRun, rates, call)
	t.Logf("%d replicas, %v, messages/s to each chat: %v", accReplicas, accRun, rates)
	run.ExpectClean(t, loadtest.Answers(f.emu.Counters()), isQuotaCode)
	for c := range chats {
		tl := loadtest.Count(byChat[c], isQuotaCode)
		if rates[c] < perChat {
			t.Logf("%s: %d of %d delivered (%v)", chats[c], tl.OK, tl.Calls, tl)
			if tl.Quota != 0 || tl.Penalized != 0 || tl.OtherAnswers != 0 || tl.Failed != 0 {
				t.Errorf("%s: %v, want no quota error, penalty or failure", chats[c], tl)
			}
			switch sent := tl.Calls - tl.Cancelled; {
			case rates[c] <= quietChat && float64(tl.OK) < quietShare*float64(sent):
				t.Errorf("%s (%.0f/s, quiet): %d of %d delivered, want at least %.0f%% (those cancelled at the end of the run aside)", chats[c], rates[c], tl.OK, sent, 100*quietShare)
			case float64(tl.OK) < 0.8*float64(sent):
				t.Errorf("%s (%.0f/s, under its limit): %d of %d delivered, want at least 80%%", chats[c], rates[c], tl.OK, sent)
			}
			continue
		}
		busy := 0
		for _, a := range f.successes(feishu.IMSend, chats[c]) {
			if !a.At.Before(run.Start) && a.At.Before(run.End) {
				busy++
			}
		}
		rate := float64(busy) / accRun.Seconds()
		t.Logf("%s: %d delivered, %.2f/s = %.0f%% of its %d/s (%v)", chats[c], busy, rate, 100*rate/perChat, perChat, tl)
		if rate < 0.85*perChat {
			t.Errorf("%s: %.2f/s delivered, want at least 85%% of %d/s", chats[c], rate, perChat)
		}
		if tl.Quota != 0 || tl.Penalized != 0 || tl.OtherAnswers != 0 || tl.Failed != 0 {
			t.Errorf("%s: %v, want no quota error, penalty or failure", chats[c], tl)
		}
	}
}
