package feishu

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"sync"

	"github.com/quotaware/throttle/internal/apipath"
	"github.com/quotaware/throttle/providers"
	"github.com/quotaware/throttle/providers/internal/jsoncode"
	"github.com/quotaware/throttle/providers/internal/scopekind"
)

// A reply names only the message it answers, yet Feishu counts it against
// that message's chat. The preset learns which chat each message belongs to
// from the answers that pass through the Transport (sends, replies and
// forwards answer data.message_id and data.chat_id; GET message answers
// data.items[].chat_id), and keys a reply to a known message by its chat.
//
// The memory is per process. Sharing it through Redis would cost every reply
// a second round trip before its limiter call, and would still not know the
// messages no replica sent: those received in events, which a bot replies
// to most. Their replies name the chat with ReplyInChat (the event carries
// chat_id); a replica replying to a message another replica sent can do the
// same, or read the message first.

// ReplyInChat returns a context naming the chat (its chat_id, oc_...) that
// replies sent with it answer in. Use it when replying to a message this
// process has not seen in an answer, typically one received in an event
// (im.message.receive_v1 carries message.chat_id): the reply then counts
// against that chat's 5/s like a send to it, instead of against the message
// alone. A message the preset has learned keeps its learned chat. The
// chat_id only reaches keys and scopes hashed.
func ReplyInChat(ctx context.Context, chatID string) context.Context {
	return context.WithValue(ctx, replyChatKey{}, chatID)
}

type replyChatKey struct{}

// replyChat returns the recipient key of the chat ReplyInChat named, or "".
func (p *preset) replyChat(r *http.Request) string {
	if id, _ := r.Context().Value(replyChatKey{}).(string); id != "" {
		return p.hashID("chat_id", id)
	}
	return ""
}

// messageMemory bounds the messages remembered by a Preset, every app and
// tenant together (one memory, the oldest evicted first): 13.6 MB of heap
// when full (3.4 MB measured per 65,536). At one app's 1000 sends a minute
// it holds the last four hours of its messages; replies usually follow
// within one. It used to be 65,536 per app and tenant, and a preset kept
// per tenant ever seen: a store app's heap grew by 6 KB a tenant without
// end, and could reach 3.4 MB a busy tenant.
const messageMemory = 1 << 18

// answerPeekLimit bounds how much of an IM answer Classify reads to learn a
// message's chat: the answer repeats the message's content (a card up to
// 30 KB), before or after chat_id. A longer answer is not learned.
const answerPeekLimit = 64 << 10

// imGetMessage reads a message; its answer names the message's chat.
const imGetMessage = "GET /open-apis/im/v1/messages/:message_id"

// messageKey names a message of an app (or tenant) in memory: a hash of
// both IDs, so no message ID is kept, and the apps sharing the memory (whose
// recipient keys differ) never read each other's.
type messageKey [12]byte

func keyOfMessage(app, id string) messageKey {
	var buf [160]byte // IDs are 35 bytes, apps 20 (64 with a tenant): no allocation
	b := append(append(append(append(buf[:0], "message\x00"...), app...), 0), id...)
	sum := sha256.Sum256(b)
	return messageKey(sum[:12])
}

// chatKey is a recipient key (hashID's hex) decoded, to keep entries small.
type chatKey [12]byte

// messageChats maps messages to the recipient key (hashID) of their chat,
// keeping at most its capacity and evicting the oldest first. It is safe
// for concurrent use.
type messageChats struct {
	mu       sync.Mutex
	capacity int
	chats    map[messageKey]chatKey
	order    []messageKey // the keys in insertion order; a ring once full
	next     int          // the oldest key in order, once full
}

// newMessageChats makes an empty memory; it grows as it learns, so a preset
// that sends no messages (one per tenant of a store app) costs little.
func newMessageChats(capacity int) *messageChats {
	return &messageChats{capacity: capacity, chats: map[messageKey]chatKey{}}
}

// chat returns the recipient key of app's message's chat, or "" when
// unknown.
func (m *messageChats) chat(app, id string) string {
	k := keyOfMessage(app, id)
	m.mu.Lock()
	chat, ok := m.chats[k]
	m.mu.Unlock()
	if !ok {
		return ""
	}
	return hex.EncodeToString(chat[:])
}

// learn records the message's chat, a recipient key (hashID), unless it is
// known already: a message never changes chats, and the first key learned
// (a send's recipient) is the one its chat's sends are counted by.
func (m *messageChats) learn(app, id, chat string) {
	var c chatKey
	if id == "" || hex.DecodedLen(len(chat)) != len(c) {
		return
	}
	if _, err := hex.Decode(c[:], []byte(chat)); err != nil {
		return
	}
	k := keyOfMessage(app, id)
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.chats[k]; ok {
		return
	}
	if len(m.order) < m.capacity {
		m.order = append(m.order, k)
	} else {
		delete(m.chats, m.order[m.next])
		m.order[m.next] = k
		m.next = (m.next + 1) % len(m.order)
	}
	m.chats[k] = c
}

func (m *messageChats) len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.chats)
}

// learnsMessages reports whether the API's answers name messages and their
// chats.
func learnsMessages(api string) bool {
	switch api {
	case IMSend, imReply, imForward, imMergeForward, imGetMessage:
		return true
	}
	return false
}

// learn records the chats of the messages a successful IM answer names.
// The chat is the route's recipient when the route knew it (a send's
// receive_id, a reply to a known message), so that replies join the sends
// to that recipient even when it is a user (whose chat_id is the p2p chat);
// otherwise the chat_id of the answer.
func (p *preset) learn(r *http.Request, route *providers.Route, prefix []byte) {
	data := objectMember(prefix, "data")
	if data == nil {
		return
	}
	switch route.API {
	case imGetMessage:
		items := arrayMember(data, "items")
		if len(items) < 2 {
			return
		}
		// The first item is the message asked for (the others, for a merged
		// forward, are the messages it bundles, from other chats).
		id, chat := messageAndChat(items[1:])
		if id == messageIDOf(r) {
			p.messages.learn(p.cfg.AppID, id, p.hashID("chat_id", chat))
		}
		return
	case imMergeForward:
		if data = objectMember(data, "message"); data == nil {
			return
		}
	}
	id, chat := messageAndChat(data)
	if chat == "" {
		return
	}
	key := p.routeChat(route)
	if key == "" || key == unknownRecipient ||
		(route.API == imReply && key == p.hashID("message", messageIDOf(r))) {
		key = p.hashID("chat_id", chat)
	}
	p.messages.learn(p.cfg.AppID, id, key)
	if route.API == imReply {
		p.messages.learn(p.cfg.AppID, messageIDOf(r), key) // the message answered, in the same chat
	}
}

// routeChat returns the recipient key of the route's chat scope, or "".
func (p *preset) routeChat(route *providers.Route) string {
	chat, _ := strings.CutPrefix(route.Scope(scopekind.Entity), p.chatScopePrefix)
	if chat == route.Scope(scopekind.Entity) {
		return ""
	}
	return chat
}

// messageIDOf returns the :message_id of an IM message path.
func messageIDOf(r *http.Request) string {
	if r == nil || r.URL == nil {
		return ""
	}
	// The path as sent (an Opaque URL's too), repeated leading slashes
	// merged, as in match.
	id, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimLeft(apipath.Clean(apipath.Sent(r.URL)), "/"), "open-apis/im/v1/messages/"), "/")
	return id
}

// messageAndChat reads message_id and chat_id of a message object.
func messageAndChat(obj []byte) (id, chat string) {
	jsoncode.Scan(obj, func(k []byte, vk jsoncode.ValueKind, v []byte) bool {
		if vk == jsoncode.String {
			switch string(k) {
			case "message_id":
				id = jsoncode.Unquote(v)
			case "chat_id":
				chat = jsoncode.Unquote(v)
			}
		}
		return id == "" || chat == ""
	})
	return id, chat
}

// objectMember returns the raw object value of a top-level member, or nil
// when it is missing, not an object or cut short.
func objectMember(obj []byte, name string) []byte {
	return member(obj, name, jsoncode.Object)
}

// arrayMember is objectMember for an array value.
func arrayMember(obj []byte, name string) []byte {
	return member(obj, name, jsoncode.Array)
}

func member(obj []byte, name string, kind jsoncode.ValueKind) []byte {
	var out []byte
	jsoncode.Scan(obj, func(k []byte, vk jsoncode.ValueKind, v []byte) bool {
		if string(k) == name {
			if vk == kind {
				out = v
			}
			return false
		}
		return true
	})
	return out
}
