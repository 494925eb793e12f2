package feishutest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// CodeInvalidMessage answers a reply to, or a read of, a message the
// emulator did not create for that app.
const CodeInvalidMessage = 230001

// The message APIs that name a message in the path; a reply counts against
// the chat of the message it answers, like a send to that chat.
const (
	imReply      = "POST /open-apis/im/v1/messages/:message_id/reply"
	imGetMessage = "GET /open-apis/im/v1/messages/:message_id"
)

// message is one message the emulator created, kept for as long as the
// server runs.
type message struct {
	id, app   string
	chatID    string // the chat it is in, answered as chat_id
	recipient string // the receive_id whose 5/s its chat's messages count against
	root      string // the first message of its reply thread, for a reply
	parent    string // the message it answers, for a reply
	msgType   string
	content   string
	created   time.Time
}

// messagePath returns the :message_id of an IM message path.
func messagePath(path string) string {
	id, _, _ := strings.Cut(strings.TrimPrefix(path, "/open-apis/im/v1/messages/"), "/")
	return id
}

// p2pChat names the single chat between the app and a user, as Feishu
// answers it for a message sent to the user by open_id, user_id, union_id or
// email.
func p2pChat(app, kind, user string) string {
	sum := sha256.Sum256([]byte(app + "\x00" + kind + "\x00" + user))
	return "oc_" + hex.EncodeToString(sum[:16])
}

// parentLocked finds the message a reply answers or a read asks for, owned
// by app.
func (s *Server) parentLocked(app, path string) (*message, bool) {
	m, ok := s.messages[messagePath(path)]
	if !ok || m.app != app {
		return nil, false
	}
	return m, true
}

// createLocked records a new message of app to recipient (a send, forward or
// merged forward), or in parent's chat (a reply), and returns it.
func (s *Server) createLocked(r *http.Request, body []byte, app, recipient string, parent *message, emu time.Time) *message {
	var req struct {
		MsgType string `json:"msg_type"`
		Content string `json:"content"`
	}
	_ = json.Unmarshal(body, &req)
	m := &message{
		id: fmt.Sprintf("om_%016x%016x", rand.Uint64(), rand.Uint64()), app: app,
		recipient: recipient, msgType: req.MsgType, content: req.Content, created: emu,
	}
	switch {
	case parent != nil:
		m.chatID, m.recipient, m.parent, m.root = parent.chatID, parent.recipient, parent.id, parent.root
		if m.root == "" {
			m.root = parent.id
		}
	case r.URL.Query().Get("receive_id_type") == "chat_id" || strings.HasPrefix(recipient, "oc_"):
		m.chatID = recipient
	default:
		m.chatID = p2pChat(app, r.URL.Query().Get("receive_id_type"), recipient)
	}
	if m.msgType == "" {
		m.msgType = "text"
		if strings.HasSuffix(r.URL.Path, "/merge_forward") {
			m.msgType = "merge_forward"
		}
	}
	s.messages[m.id] = m
	return m
}

// messageJSON writes a message as Feishu's answers do, its fields in the
// order of Feishu's documentation.
func (m *message) messageJSON(app string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `{"message_id":%q`, m.id)
	if m.parent != "" {
		fmt.Fprintf(&b, `,"root_id":%q,"parent_id":%q`, m.root, m.parent)
	}
	ms := strconv.FormatInt(m.created.UnixMilli(), 10)
	fmt.Fprintf(&b, `,"msg_type":%q,"create_time":%q,"update_time":%q,"deleted":false,"updated":false,"chat_id":%q`,
		m.msgType, ms, ms, m.chatID)
	fmt.Fprintf(&b, `,"sender":{"id":%q,"id_type":"app_id","sender_type":"app","tenant_key":"736588c9260f175d"}`, app)
	content, _ := json.Marshal(m.content)
	fmt.Fprintf(&b, `,"body":{"content":%s}}`, content)
	return b.String()
}

// messageReply answers a successful send, reply or forward with the new
// message, a merged forward with it under "message", and a read with the
// message in "items".
func messageReply(api string, m *message) reply {
	var data string
	switch api {
	case imMergeForward:
		data = `{"message":` + m.messageJSON(m.app) + `,"invalid_message_id_list":[]}`
	case imGetMessage:
		data = `{"items":[` + m.messageJSON(m.app) + `]}`
	default:
		data = m.messageJSON(m.app)
	}
	return reply{status: http.StatusOK, body: `{"code":0,"msg":"success","data":` + data + `}`}
}

// Receive records a message a user posted in the group chat chatID, as app
// receives it in an im.message.receive_v1 event, and returns its
// message_id: app may reply to it and read it, and replies to it count
// against chatID. It is counted against no limit.
func (s *Server) Receive(app, chatID string) string {
	s.em.Lock()
	defer s.em.Unlock()
	_, emu := s.em.Times()
	m := &message{
		id: fmt.Sprintf("om_%016x%016x", rand.Uint64(), rand.Uint64()), app: app,
		chatID: chatID, recipient: chatID, msgType: "text", content: `{"text":"hello"}`, created: emu,
	}
	s.messages[m.id] = m
	return m.id
}
