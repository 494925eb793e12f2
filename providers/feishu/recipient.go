package feishu

// Recipients: Feishu limits IM messages to 5/s per chat or user, named in
// the request body; this file finds the recipient of a send, forward or
// reply and names its rule and penalty scope by a hash.

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"time"

	"github.com/quotaware/throttle/providers"
	"github.com/quotaware/throttle/providers/internal/jsoncode"
)

// The APIs that carry the per-recipient limit, and where they name the
// recipient.
const (
	imReply        = "POST /open-apis/im/v1/messages/:message_id/reply"
	imForward      = "POST /open-apis/im/v1/messages/:message_id/forward"
	imMergeForward = "POST /open-apis/im/v1/messages/merge_forward"
)

// chatBookAhead is how far ahead a message may book its chat's slot (and
// with it the app's shared IM rules): far less than the chat's 200 ms
// spacing, so another chat's message waits at most that long behind it,
// and enough for the Transport to let a chat's older waiters ask first.
const chatBookAhead = 50 * time.Millisecond

// unknownRecipient stands for every recipient Route could not read: they
// share one per-recipient rule, so an unread send is slower, never over.
const unknownRecipient = "unknown"

// chatOf returns a hash naming the recipient of an IM send, forward or
// reply, or "" for other APIs. Hashing bounds the key and keeps chat IDs,
// user IDs and emails out of Redis keys and telemetry.
func (p *preset) chatOf(name string, r *http.Request) string {
	if p.cfg.PerChat <= 0 {
		return ""
	}
	switch name {
	case IMSend, imForward, imMergeForward:
		return p.recipient(r)
	case imReply:
		// The reply goes to the chat of the message it answers, and Feishu
		// counts it against that chat's 5/s (docs/providers.md: "5/s to the
		// same user or chat"), but the request names only the message. A
		// message whose chat the preset learned from an answer (messages.go)
		// is keyed by that chat, like a send to it, and so is one whose chat
		// the caller named (ReplyInChat). Any other message keeps a key of
		// its own: keying every unknown reply of the app to one 5/s
		// rule would cap the bot's replies in all its chats at 5/s. Replies
		// to several unknown messages of one chat can then meet a 230020,
		// which penalises that message's scope only.
		// batch_send (message/v4) names its recipients in lists and has no
		// rule here: docs/providers.md records no per-recipient limit for it.
		id := messageIDOf(r)
		if chat := p.messages.chat(id); chat != "" {
			return chat
		}
		if chat := replyChat(r); chat != "" {
			return chat
		}
		return hashID("message", id)
	}
	return ""
}

// recipient reads receive_id from the query (old clients) or from the
// first ChatPeekLimit bytes of the JSON body, with receive_id_type from the
// query: the same ID means different people as an open_id and a user_id.
func (p *preset) recipient(r *http.Request) string {
	q := r.URL.Query()
	kind := q.Get("receive_id_type")
	if id := q.Get("receive_id"); id != "" {
		return hashID(kind, id)
	}
	prefix, _ := providers.PeekRequestBody(r, p.cfg.ChatPeekLimit)
	var id string
	jsoncode.Scan(prefix, func(k []byte, vk jsoncode.ValueKind, v []byte) bool {
		if string(k) == "receive_id" {
			if vk == jsoncode.String {
				id = jsoncode.Unquote(v)
			}
			return false
		}
		return true
	})
	if id == "" {
		return unknownRecipient
	}
	return hashID(kind, id)
}

func hashID(kind, id string) string {
	sum := sha256.Sum256([]byte(kind + "\x00" + id))
	return hex.EncodeToString(sum[:12])
}
