package feishutest

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quotaware/throttle/providers/internal/emulator"
)

// msg is the part of a message answer the tests read.
type msg struct {
	MessageID string `json:"message_id"`
	ParentID  string `json:"parent_id"`
	RootID    string `json:"root_id"`
	ChatID    string `json:"chat_id"`
	MsgType   string `json:"msg_type"`
	Body      struct {
		Content string `json:"content"`
	} `json:"body"`
}

type msgAnswer struct {
	status int
	Code   int `json:"code"`
	Data   struct {
		msg
		Message *msg  `json:"message"`
		Items   []msg `json:"items"`
	} `json:"data"`
}

func doMsg(t *testing.T, s *Server, method, target, tok, body string) msgAnswer {
	t.Helper()
	req, _ := http.NewRequest(method, s.URL+target, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := s.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := msgAnswer{status: resp.StatusCode}
	if err := json.Unmarshal(raw, &a); err != nil {
		t.Fatalf("body %q: %v", raw, err)
	}
	return a
}

// Sends, replies and forwards answer the new message with its chat; a
// reply counts against the chat of the message it answers, whichever
// message of the chat that is.
func TestRepliesCountAgainstTheirChat(t *testing.T) {
	clk := emulator.NewManualClock(t0)
	s := NewServer(Options{PerChat: 2, Clock: clk.Now})
	defer s.Close()
	tok := s.Token("cli_a")
	const send = "/open-apis/im/v1/messages?receive_id_type="
	reply := func(id string) msgAnswer {
		return doMsg(t, s, "POST", "/open-apis/im/v1/messages/"+id+"/reply", tok, `{"msg_type":"text","content":"{\"text\":\"ack\"}"}`)
	}

	var sent []msg
	for i := range 2 {
		a := doMsg(t, s, "POST", send+"chat_id", tok, `{"receive_id":"oc_1","msg_type":"text","content":"{\"text\":\"hi\"}"}`)
		if a.Code != 0 || !strings.HasPrefix(a.Data.MessageID, "om_") || a.Data.ChatID != "oc_1" || a.Data.Body.Content != `{"text":"hi"}` {
			t.Fatalf("send %d: %+v", i, a)
		}
		sent = append(sent, a.Data.msg)
	}
	if sent[0].MessageID == sent[1].MessageID {
		t.Fatalf("two sends answered one message_id %s", sent[0].MessageID)
	}
	toUser := doMsg(t, s, "POST", send+"open_id&receive_id=ou_1", tok, `{}`)
	again := doMsg(t, s, "POST", send+"open_id&receive_id=ou_1", tok, `{}`)
	if p2p := toUser.Data.ChatID; toUser.Code != 0 || !strings.HasPrefix(p2p, "oc_") || again.Data.ChatID != p2p {
		t.Fatalf("sends to a user: chat_id %q then %q, want one p2p chat oc_...", p2p, again.Data.ChatID)
	}

	clk.Add(time.Second)
	for i, m := range sent { // two different messages of oc_1: its 2/s
		a := reply(m.MessageID)
		if a.Code != 0 || a.Data.ChatID != "oc_1" || a.Data.ParentID != m.MessageID || a.Data.RootID != m.MessageID ||
			a.Data.MessageID == m.MessageID {
			t.Fatalf("reply %d: %+v", i, a)
		}
		sent = append(sent, a.Data.msg)
	}
	if a := reply(sent[2].MessageID); a.status != http.StatusBadRequest || a.Code != CodeChatFrequency {
		t.Fatalf("third reply in oc_1 in a second (to a reply): %+v", a)
	}
	if a := doMsg(t, s, "POST", send+"chat_id", tok, `{"receive_id":"oc_1"}`); a.Code != CodeChatFrequency {
		t.Fatalf("a send after two replies in the second: %+v", a)
	}
	if a := reply(toUser.Data.MessageID); a.Code != 0 || a.Data.ChatID != toUser.Data.ChatID {
		t.Fatalf("reply in the p2p chat, another recipient: %+v", a)
	}
	clk.Add(time.Second)
	if a := reply(sent[2].MessageID); a.Code != 0 || a.Data.RootID != sent[0].MessageID || a.Data.ParentID != sent[2].MessageID {
		t.Fatalf("reply to a reply, next second: %+v", a)
	}

	other := s.Token("cli_b")
	for name, a := range map[string]msgAnswer{
		"unknown message":      reply("om_0123456789abcdef0123456789abcdef"),
		"another app's reply":  doMsg(t, s, "POST", "/open-apis/im/v1/messages/"+sent[0].MessageID+"/reply", other, `{}`),
		"another app's read":   doMsg(t, s, "GET", "/open-apis/im/v1/messages/"+sent[0].MessageID, other, ""),
		"unknown message read": doMsg(t, s, "GET", "/open-apis/im/v1/messages/om_x", tok, ""),
	} {
		if a.status != http.StatusBadRequest || a.Code != CodeInvalidMessage {
			t.Errorf("%s: %+v, want 400 and %d", name, a, CodeInvalidMessage)
		}
	}

	// Reads name the chat and count against the API only: the chat's 2/s is
	// spent and reads still go through.
	doMsg(t, s, "POST", send+"chat_id", tok, `{"receive_id":"oc_1"}`)
	doMsg(t, s, "POST", send+"chat_id", tok, `{"receive_id":"oc_1"}`)
	for range 3 {
		a := doMsg(t, s, "GET", "/open-apis/im/v1/messages/"+sent[1].MessageID, tok, "")
		if a.Code != 0 || len(a.Data.Items) != 1 || a.Data.Items[0].MessageID != sent[1].MessageID || a.Data.Items[0].ChatID != "oc_1" {
			t.Fatalf("read: %+v", a)
		}
	}
	merged := doMsg(t, s, "POST", "/open-apis/im/v1/messages/merge_forward?receive_id_type=chat_id", tok,
		`{"receive_id":"oc_2","message_id_list":["`+sent[0].MessageID+`"]}`)
	if m := merged.Data.Message; merged.Code != 0 || m == nil || m.ChatID != "oc_2" || m.MsgType != "merge_forward" {
		t.Fatalf("merged forward: %+v", merged)
	}

	// A message received in an event: replies to it count against its chat.
	clk.Add(time.Second)
	received := s.Receive("cli_a", "oc_3")
	for i, want := range []int{0, 0, CodeChatFrequency} {
		if a := reply(received); a.Code != want || (want == 0 && (a.Data.ChatID != "oc_3" || a.Data.ParentID != received)) {
			t.Fatalf("reply %d to a received message: %+v, want code %d", i, a, want)
		}
	}

	var replies int
	for _, r := range s.Requests() {
		if r.Path == imReply && r.Code != CodeInvalidMessage && r.ReceiveID != "oc_1" && r.ReceiveID != "ou_1" && r.ReceiveID != "oc_3" {
			t.Errorf("reply recorded against %q", r.ReceiveID)
		}
		if r.Path == imReply && r.Code == 0 {
			replies++
		}
	}
	if replies != 6 {
		t.Errorf("%d replies recorded as delivered, want 6", replies)
	}
}
