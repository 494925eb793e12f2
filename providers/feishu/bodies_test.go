package feishu_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
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

// Two replicas on one Redis send 24 messages at once to one chat, written
// four ways an SDK or a hand-made body may write them: receive_id first;
// after 5 KiB of content (a map marshalled by encoding/json); with the key
// in another case; and twice, another chat first (Go's decoder, like the
// emulator's, keeps the last). The emulator decodes each body with
// encoding/json and counts its own 5/s per chat: it must answer no 230020,
// and every message must arrive.
func TestRecipientHoweverTheBodyNamesIt(t *testing.T) {
	const n, replicas = 24, 2
	app := "cli_" + limitertest.Group(t)
	emu := feishutest.NewServer(feishutest.Options{LatencyMax: accLatency})
	t.Cleanup(emu.Close)
	u, _ := url.Parse(emu.URL)
	profile := feishu.MustNew(feishu.Config{Hosts: []string{u.Hostname()}, Jitter: 100 * time.Millisecond, Apps: []feishu.App{{AppID: app}}}).Profile()
	clients := loadtest.Replicas(t, replicas, throttle.WithProfiles(profile), throttle.WithMaxWait(20*time.Second))
	token := emu.Token(app)

	late, _ := json.Marshal(map[string]string{"content": `{"text":"` + strings.Repeat("x", 5<<10) + `"}`, "msg_type": "text", "receive_id": "oc_busy"})
	bodies := []string{
		`{"receive_id":"oc_busy","msg_type":"text","content":"{\"text\":\"hi\"}"}`,
		string(late),
		`{"Receive_ID":"oc_busy","msg_type":"text","content":"{\"text\":\"hi\"}"}`,
		`{"receive_id":"oc_other","msg_type":"text","content":"{\"text\":\"hi\"}","receive_id":"oc_busy"}`,
	}
	var (
		mu      sync.Mutex
		results []loadtest.Result
		wg      sync.WaitGroup
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost,
				emu.URL+"/open-apis/im/v1/messages?receive_id_type=chat_id", strings.NewReader(bodies[i%len(bodies)]))
			req.Header.Set("Authorization", "Bearer "+token)
			req.Header.Set("Content-Type", "application/json; charset=utf-8")
			r := loadtest.Send(clients[i%replicas], req, "code")
			mu.Lock()
			results = append(results, r)
			mu.Unlock()
		}()
	}
	wg.Wait()
	cs := emu.Counters()
	tl := loadtest.Count(results, isQuotaCode)
	t.Logf("callers: %v; emulator: %d requests, %d ok, errors by code %v", tl, cs.Total, cs.OK, cs.ByCode)
	if cs.Total != cs.OK {
		t.Errorf("the emulator gave %d error answers (by code %v), want none: the chat's 5/s was exceeded", cs.Total-cs.OK, cs.ByCode)
	}
	if tl.OK != n {
		t.Errorf("%d of %d messages delivered: %v", tl.OK, n, tl)
	}
	busy := 0
	for _, r := range emu.Requests() {
		if r.ReceiveID == "oc_busy" {
			busy++
		}
	}
	if busy != n {
		t.Errorf("the emulator read oc_busy as the recipient of %d messages, want %d", busy, n)
	}
}
