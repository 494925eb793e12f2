package feishu_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotaware/throttle/internal/loadtest"
	"github.com/quotaware/throttle/providers/feishu"
	"github.com/quotaware/throttle/providers/feishu/feishutest"
)

// imReply is the reply API, as the emulator names it.
const imReply = "POST /open-apis/im/v1/messages/:message_id/reply"

// Four replicas each send two messages to one group chat; then all four
// reply to those eight different messages at four times the chat's 5/s for
// eight seconds. A replica learns the chat of the messages it sent from the
// answers; of the other replicas' messages, replicas 0 and 1 read each
// first (and learn it from that answer), replicas 2 and 3 name the chat with
// feishu.ReplyInChat, as for a message received in an event. So every reply
// shares the chat's rule: the emulator (which counts replies against the chat of
// the message they answer) rejects nothing, and the chat gets at least 85%
// of its 5/s. Keyed by the message answered, as before, the eight messages
// would have let up to 40 replies/s at the chat.
func TestAcceptanceRepliesToOneChatShareItsLimit(t *testing.T) {
	const (
		chat      = "oc_busy0a1b2c3d4e5f6a7b8c9d0e1f2a3"
		perSender = 2
		run       = 8 * time.Second
		demand    = 4 * perChat // replies/s to the chat in all
	)
	f := newAccFleet(t, feishu.Config{Apps: []feishu.App{{}}}, feishutest.Options{})
	messageID := func(data json.RawMessage) string {
		var m struct {
			MessageID string `json:"message_id"`
		}
		_ = json.Unmarshal(data, &m)
		return m.MessageID
	}

	// Each replica sends its messages, and learns their chat from the answers.
	ctx := context.Background()
	var messages []string
	sentBy := map[string]int{}
	for i := range f.clients {
		for range perSender {
			data, r := f.im(ctx, i, http.MethodPost, "/open-apis/im/v1/messages?receive_id_type=chat_id",
				`{"receive_id":"`+chat+`","msg_type":"text","content":"{\"text\":\"build 1.4 is ready\"}"}`)
			if r.Err != nil || r.Code != 0 || messageID(data) == "" {
				t.Fatalf("replica %d: send: %+v %s", i, r, data)
			}
			messages = append(messages, messageID(data))
			sentBy[messageID(data)] = i
		}
	}
	// Replicas 0 and 1 read the messages they did not send, and learn theirs.
	for i := range 2 {
		for _, m := range messages {
			if sentBy[m] == i {
				continue
			}
			if _, r := f.im(ctx, i, http.MethodGet, "/open-apis/im/v1/messages/"+m, ""); r.Err != nil || r.Code != 0 {
				t.Fatalf("replica %d: read %s: %+v", i, m, r)
			}
		}
	}

	reply := func(ctx context.Context, i, m int) loadtest.Result {
		if i >= 2 && sentBy[messages[m]] != i {
			ctx = feishu.ReplyInChat(ctx, chat)
		}
		_, r := f.im(ctx, i, http.MethodPost, "/open-apis/im/v1/messages/"+messages[m]+"/reply",
			replyBody)
		return r
	}
	res := loadtest.Fire(accReplicas, run, slices.Repeat([]float64{demand / float64(len(messages))}, len(messages)), reply)
	t.Logf("%d replicas, %v, %d messages of one chat, %d replies/s to them in all (%d× the chat's %d/s)",
		accReplicas, run, len(messages), demand, demand/perChat, perChat)
	res.ExpectClean(t, loadtest.Answers(f.emu.Counters()), isQuotaCode)
	f.expectChatNearItsLimit(t, res, chat)
}

// im sends one IM call from replica i as the SDK would, and returns the
// answer's data and how the caller saw it.
func (f *accFleet) im(ctx context.Context, i int, method, path, body string) (json.RawMessage, loadtest.Result) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequestWithContext(ctx, method, f.emu.URL+path, rd)
	req.Header.Set("Authorization", "Bearer "+f.token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json; charset=utf-8")
	}
	resp, err := f.clients[i].Do(req)
	if err != nil {
		return nil, loadtest.Result{Err: err}
	}
	defer resp.Body.Close()
	var a struct {
		Code int             `json:"code"`
		Data json.RawMessage `json:"data"`
	}
	if raw, _ := io.ReadAll(resp.Body); json.Unmarshal(raw, &a) != nil || (a.Code == 0 && resp.StatusCode != http.StatusOK) {
		return nil, loadtest.Result{Code: -resp.StatusCode}
	}
	return a.Data, loadtest.Result{Code: a.Code}
}

// replyBody is what the replies of the runs say.
const replyBody = `{"msg_type":"text","content":"{\"text\":\"on it\"}"}`

// expectChatNearItsLimit fails t unless the replies delivered to chat during
// the run reach 85% of the chat's 5/s.
func (f *accFleet) expectChatNearItsLimit(t *testing.T, res loadtest.Run, chat string) {
	t.Helper()
	delivered := 0
	for _, a := range f.successes(imReply, chat) {
		if !a.At.Before(res.Start) && a.At.Before(res.End) {
			delivered++
		}
	}
	rate := float64(delivered) / res.End.Sub(res.Start).Seconds()
	t.Logf("%s: %d replies delivered, %.2f/s = %.0f%% of its %d/s", chat, delivered, rate, 100*rate/perChat, perChat)
	if rate < 0.85*perChat {
		t.Errorf("%.2f replies/s delivered to the chat, want at least 85%% of %d/s", rate, perChat)
	}
}

// A bot answers every message users post in one busy group chat, each
// received in an event that names the chat: four replicas reply once to
// each of many different messages, none of which passed through them, at
// four times the chat's 5/s for eight seconds, naming the chat with
// feishu.ReplyInChat. The emulator rejects nothing and the chat gets at
// least 85% of its 5/s. Without the chat, each reply would count against
// its own message and nothing would hold the chat to 5/s.
func TestAcceptanceRepliesToEventsNameTheirChat(t *testing.T) {
	const (
		chat   = "oc_busy0a1b2c3d4e5f6a7b8c9d0e1f2a3"
		run    = 8 * time.Second
		demand = 4 * perChat
	)
	f := newAccFleet(t, feishu.Config{Apps: []feishu.App{{}}}, feishutest.Options{})
	var mu sync.Mutex
	var posted []string // the users' messages, each replied to once
	for range 2 * demand * int(run/time.Second) {
		posted = append(posted, f.emu.Receive(f.app, chat))
	}
	reply := func(ctx context.Context, i, _ int) loadtest.Result {
		mu.Lock()
		m := posted[0]
		posted = posted[1:]
		mu.Unlock()
		_, r := f.im(feishu.ReplyInChat(ctx, chat), i, http.MethodPost, "/open-apis/im/v1/messages/"+m+"/reply", replyBody)
		return r
	}
	res := loadtest.Fire(accReplicas, run, []float64{demand}, reply)
	t.Logf("%d replicas, %v, one reply to each of the messages posted to one chat, %d/s in all (%d× the chat's %d/s)",
		accReplicas, run, demand, demand/perChat, perChat)
	res.ExpectClean(t, loadtest.Answers(f.emu.Counters()), isQuotaCode)
	f.expectChatNearItsLimit(t, res, chat)
}
