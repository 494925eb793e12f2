package feishu_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/internal/loadtest"
	"github.com/quotaware/throttle/limiter/limitertest"
	"github.com/quotaware/throttle/providers/feishu"
	"github.com/quotaware/throttle/providers/feishu/feishutest"
)

// A batch of 100 IM messages at once (level 4: 1000 per minute and 50 per
// second), each to its own chat, from four replicas: the per-minute window
// lets the whole batch through and the per-second rule paces it (50 in any
// 1.1 s), so the last message is scheduled about 2.2 s after the first,
// where two evenly paced rules would take 6 s. The finish is proven from the waits the
// limiter scheduled (span attribute throttle.wait_s), not from the wall
// clock: a loaded machine cannot make it look slower. The emulator rejects
// nothing.
func TestBurstOfOneHundredMessages(t *testing.T) {
	const (
		n        = 100
		replicas = 4
		budget   = 2500 * time.Millisecond
	)
	app := "cli_" + limitertest.Group(t)
	emu := feishutest.NewServer(feishutest.Options{LatencyMax: accLatency})
	t.Cleanup(emu.Close)
	u, _ := url.Parse(emu.URL)
	// Jitter 100 ms: the spread from a slot to the emulator's count is the
	// emulated latency (0-20 ms) plus how late a send wakes, which under
	// the race detector on two shared cores reaches tens of milliseconds;
	// Feishu counts its 50/s in wall-clock seconds.
	profile := feishu.MustNew(feishu.Config{Hosts: []string{u.Hostname()}, Jitter: 100 * time.Millisecond, Apps: []feishu.App{{AppID: app}}}).Profile()
	clients, waits := loadtest.TracedReplicas(t, replicas, throttle.WithProfiles(profile))
	token := emu.Token(app)

	var (
		mu      sync.Mutex
		ids     []trace.SpanID
		results []loadtest.Result
		wg      sync.WaitGroup
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, id, end := waits.Start(context.Background())
			defer end()
			body := fmt.Sprintf(`{"receive_id":"oc_chat%03d","msg_type":"text","content":"{\"text\":\"deploy done\"}"}`, i)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost,
				emu.URL+"/open-apis/im/v1/messages?receive_id_type=chat_id", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+token)
			req.Header.Set("Content-Type", "application/json; charset=utf-8")
			r := loadtest.Send(clients[i%replicas], req, "code")
			mu.Lock()
			ids, results = append(ids, id), append(results, r)
			mu.Unlock()
		}()
	}
	wg.Wait()

	cs := emu.Counters()
	tl := loadtest.Count(results, isQuotaCode)
	recorded := waits.Of()
	var longest time.Duration
	for _, id := range ids {
		longest = max(longest, recorded[id].Scheduled)
	}
	recs := emu.Requests()
	var first, last time.Time
	for _, r := range recs {
		if r.Path == feishutest.IMSend {
			if first.IsZero() || r.At.Before(first) {
				first = r.At
			}
			if r.At.After(last) {
				last = r.At
			}
		}
	}
	t.Logf("callers: %v", tl)
	t.Logf("emulator: %d requests, %d ok, error answers by code %v; arrivals spread over %v (wall clock, for information)",
		cs.Total, cs.OK, cs.ByCode, last.Sub(first).Round(time.Millisecond))
	t.Logf("longest scheduled wait %v (budget %v; two evenly paced rules would need %v)",
		longest, budget, 99*(time.Minute+100*time.Millisecond)/1000)
	if cs.Total != cs.OK {
		t.Errorf("the emulator gave %d error answers (by code %v), want none", cs.Total-cs.OK, cs.ByCode)
	}
	if tl.OK != n {
		t.Errorf("%d of %d messages delivered: %v", tl.OK, n, tl)
	}
	if longest > budget {
		t.Errorf("the last message was scheduled %v after its call, want within %v", longest, budget)
	}
}
