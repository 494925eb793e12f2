package feishu

// Recipients: Feishu limits IM messages to 5/s per chat or user, named in
// the request body; this file finds the recipient of a send, forward or
// reply and names its rule and penalty scope by a hash.

import (
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/quotaware/throttle/providers/internal/bodyscan"
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

// maxRecipients bounds the recipients one send is charged to: a body
// naming more distinct ones (only a hostile one would) is charged to the
// first of them and to the unknown recipient.
const maxRecipients = 4

// chatsOf returns hashes naming the recipients an IM send, forward or reply
// is charged to, or nil for other APIs. Hashing bounds the key and keeps
// chat IDs, user IDs and emails out of Redis keys and telemetry.
func (p *preset) chatsOf(name string, r *http.Request) []string {
	if p.cfg.NoPerChat {
		return nil
	}
	switch name {
	case IMSend, imForward, imMergeForward:
		return p.recipients(r)
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
		if chat := p.messages.chat(p.cfg.AppID, id); chat != "" {
			return []string{chat}
		}
		if chat := p.replyChat(r); chat != "" {
			return []string{chat}
		}
		return []string{p.hashID("message", id)}
	}
	return nil
}

// recipients reads the recipient of a send: receive_id in the query (old
// clients) and in the JSON body, with receive_id_type from the query (the
// same ID means different people as an open_id and a user_id).
//
// The whole body is read, up to ChatPeekLimit (1 MiB, past the size Feishu
// accepts), and every receive_id in it counts, however written: a key that
// is escaped or differs in case still names the field to a lenient decoder,
// and a repeated key is kept first by some decoders and last by others. A
// send is charged to each recipient so named, so no way of writing the body
// moves it off its chat's rule. A body not read whole (longer than the
// limit, unreadable, not a JSON object) is also charged to the app's one
// unknown recipient, a member it did not see may name another chat; one
// that names no recipient goes there alone. Feishu delivers neither (it
// refuses a body without receive_id, over its size or not JSON, and a body
// that fails to read is never sent), so the unknown recipient only keeps
// such sends, too, from bursting.
func (p *preset) recipients(r *http.Request) []string {
	q := r.URL.Query()
	kinds := q["receive_id_type"]
	if len(kinds) == 0 {
		kinds = []string{""}
	}
	ids := q["receive_id"]
	members, whole := bodyscan.Read(r, p.cfg.ChatPeekLimit, maxRecipients, "receive_id")
	for _, m := range members {
		if m.Kind != jsoncode.String {
			whole = false // a decoder that reads it anyway would send it somewhere
			continue
		}
		ids = append(ids, m.Value)
	}
	var keys []string
	for _, kind := range kinds {
		for _, id := range ids {
			if id == "" {
				continue
			}
			if k := p.hashID(kind, normalID(kind, id)); !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	if len(keys) > maxRecipients {
		keys, whole = keys[:maxRecipients], false
	}
	if len(keys) == 0 || !whole {
		keys = append(keys, unknownRecipient)
	}
	return keys
}

// normalID writes an ID as Feishu compares it: an email address without
// regard to case (an assumption: Feishu resolves it to the user, and mail
// systems ignore case); open_id, user_id, union_id and chat_id exactly.
func normalID(kind, id string) string {
	if kind == "email" {
		return strings.ToLower(id)
	}
	return id
}

// hashID names a recipient in keys and scopes: a keyed hash of its kind
// and ID (Config.EntityKey).
func (p *preset) hashID(kind, id string) string {
	return p.entities.Sum(kind, id)
}
