package feishu

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/quotaware/throttle/apps"
	"github.com/quotaware/throttle/providers"
	"github.com/quotaware/throttle/providers/internal/scopekind"
)

func TestMessageChatsEvictsTheOldest(t *testing.T) {
	chat := func(n int) string { return hashID("chat_id", fmt.Sprintf("oc_%d", n)) }
	m := newMessageChats(4)
	for i := range 6 {
		m.learn("cli_a", fmt.Sprintf("om_%d", i), chat(i))
	}
	m.learn("cli_a", "om_3", chat(9)) // known: the first chat learned stays, and so does its age
	m.learn("cli_a", "", chat(9))     // nothing to learn
	m.learn("cli_a", "om_x", "")
	m.learn("cli_a", "om_y", "unknown") // not a recipient key
	for i, want := range []string{"", "", chat(2), chat(3), chat(4), chat(5)} {
		if got := m.chat("cli_a", fmt.Sprintf("om_%d", i)); got != want {
			t.Errorf("om_%d: chat %q, want %q", i, got, want)
		}
	}
	m.learn("cli_a", "om_6", chat(6)) // evicts om_2, the oldest, though om_3 was learned again since
	if m.chat("cli_a", "om_2") != "" || m.chat("cli_a", "om_3") != chat(3) || m.chat("cli_a", "om_6") != chat(6) {
		t.Errorf("after om_6: om_2 %q, om_3 %q, om_6 %q; want om_2 evicted", m.chat("cli_a", "om_2"), m.chat("cli_a", "om_3"), m.chat("cli_a", "om_6"))
	}
	if n := m.len(); n != 4 {
		t.Errorf("%d messages remembered, want the capacity, 4", n)
	}
}

// Many goroutines learning and reading at once (run with -race): the memory
// never exceeds its capacity and never answers a wrong chat.
func TestMessageChatsConcurrent(t *testing.T) {
	const capacity, workers, each = 256, 8, 2000
	m := newMessageChats(capacity)
	chatOf := func(id string) string { return hashID("chat_id", "oc_"+id) }
	var wg sync.WaitGroup
	errs := make(chan string, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				id := fmt.Sprintf("om_%d_%d", w, i)
				m.learn("cli_a", id, chatOf(id))
				for _, read := range []string{id, fmt.Sprintf("om_%d_%d", (w+1)%workers, i)} {
					if got := m.chat("cli_a", read); got != "" && got != chatOf(read) {
						errs <- fmt.Sprintf("%s: chat %q", read, got)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if n := m.len(); n != capacity {
		t.Errorf("%d messages remembered, want the capacity, %d", n, capacity)
	}
}

// answer is a successful answer naming one message of a chat, as Feishu
// writes it (the content, which may be long, before chat_id).
func answer(id, chat, content string) string {
	return `{"code":0,"msg":"success","data":{"message_id":"` + id + `","msg_type":"text","deleted":false,` +
		`"body":{"content":"` + content + `"},"chat_id":"` + chat + `","sender":{"id":"cli_x"}}}`
}

// TestRepliesCountAgainstTheLearnedChat teaches the preset one answer, then
// routes replies: a reply to a message an answer named is keyed by that
// message's chat (the same rule and scope as a send to it), a reply to any
// other message by the message.
func TestRepliesCountAgainstTheLearnedChat(t *testing.T) {
	const base = "https://open.feishu.cn/open-apis/im/v1/messages"
	sendTo := func(kind, id string) string { return base + "?receive_id_type=" + kind + "&receive_id=" + id }
	chatKey, userKey := hashID("chat_id", "oc_team"), hashID("open_id", "ou_ann")
	tests := []struct {
		name                 string
		method, target, body string // the request taught by its answer
		status               int
		answer               string
		want                 map[string]string // message -> the key its replies count against; "" for its own
	}{
		{"send to a chat", "POST", sendTo("chat_id", "oc_team"), "", 200, answer("om_1", "oc_team", "hi"),
			map[string]string{"om_1": chatKey, "om_2": ""}},
		{"send to a user: replies join the sends to the user", "POST", sendTo("open_id", "ou_ann"), "", 200, answer("om_1", "oc_p2p", "hi"),
			map[string]string{"om_1": userKey}},
		{"send whose recipient was not read", "POST", base + "?receive_id_type=chat_id", "", 200, answer("om_1", "oc_team", "hi"),
			map[string]string{"om_1": chatKey}},
		{"send, long content within the bound", "POST", sendTo("chat_id", "oc_team"), "", 200, answer("om_1", "oc_team", strings.Repeat("x", 40<<10)),
			map[string]string{"om_1": chatKey}},
		{"send, chat_id past the bound", "POST", sendTo("chat_id", "oc_team"), "", 200, answer("om_1", "oc_team", strings.Repeat("x", answerPeekLimit)),
			map[string]string{"om_1": ""}},
		{"send refused", "POST", sendTo("chat_id", "oc_team"), "", 400, `{"code":230020,"msg":"limit","data":{"message_id":"om_1","chat_id":"oc_team"}}`,
			map[string]string{"om_1": ""}},
		{"reply to an unknown message teaches both", "POST", base + "/om_0/reply", `{"msg_type":"text","content":"{}"}`, 200,
			`{"code":0,"msg":"success","data":{"message_id":"om_1","root_id":"om_0","parent_id":"om_0","chat_id":"oc_team"}}`,
			map[string]string{"om_0": chatKey, "om_1": chatKey}},
		{"forward", "POST", base + "/om_0/forward?receive_id_type=chat_id", `{"receive_id":"oc_team"}`, 200, answer("om_1", "oc_team", ""),
			map[string]string{"om_1": chatKey, "om_0": ""}},
		{"merged forward", "POST", base + "/merge_forward?receive_id_type=chat_id", `{"receive_id":"oc_team","message_id_list":["om_7"]}`, 200,
			`{"code":0,"msg":"success","data":{"message":{"message_id":"om_1","msg_type":"merge_forward","chat_id":"oc_team"},"invalid_message_id_list":[]}}`,
			map[string]string{"om_1": chatKey, "om_7": ""}},
		{"read", "GET", base + "/om_1", "", 200,
			`{"code":0,"msg":"success","data":{"items":[{"message_id":"om_1","chat_id":"oc_team"},{"message_id":"om_8","chat_id":"oc_else","upper_message_id":"om_1"}]}}`,
			map[string]string{"om_1": chatKey, "om_8": ""}},
		{"read answering another message first", "GET", base + "/om_1", "", 200,
			`{"code":0,"msg":"success","data":{"items":[{"message_id":"om_9","chat_id":"oc_team"}]}}`,
			map[string]string{"om_1": "", "om_9": ""}},
		{"other API", "GET", "https://open.feishu.cn/open-apis/im/v1/chats/oc_team", "", 200, answer("om_1", "oc_team", ""),
			map[string]string{"om_1": ""}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := testProfile(t, Config{Apps: []App{{}}})
			req, _ := http.NewRequest(tc.method, tc.target, strings.NewReader(tc.body))
			if tc.body == "" {
				req.Body = nil
			}
			resp := response(tc.status, nil, tc.answer)
			if v := routedClassify(p, req, resp); (v.Kind == providers.OK) != (tc.status == 200) {
				t.Errorf("verdict %+v", v)
			}
			if got, err := io.ReadAll(resp.Body); err != nil || string(got) != tc.answer {
				t.Fatalf("the caller reads %d bytes, %v; want the answer, byte for byte", len(got), err)
			}
			for id, want := range tc.want {
				if want == "" {
					want = hashID("message", id)
				}
				r, err := p.Route(request("POST", base+"/"+id+"/reply"))
				if err != nil {
					t.Fatal(err)
				}
				if got := r.Rules[len(r.Rules)-1].String(); !strings.HasPrefix(got, "chat:"+app+":"+want+":") {
					t.Errorf("reply to %s: rule %q, want chat key %s", id, got, want)
				}
				if got := r.Scope(scopekind.Entity); got != scopekind.Of(scopekind.Entity, app+":chat#"+want) {
					t.Errorf("reply to %s: scope %q", id, got)
				}
			}
		})
	}
	// The rule and scope of a reply to a learned message are those of a
	// send to its chat.
	p := testProfile(t, Config{Apps: []App{{}}})
	send := request("POST", sendTo("chat_id", "oc_team"))
	routedClassify(p, send, response(200, nil, answer("om_1", "oc_team", "")))
	sent, _ := p.Route(request("POST", sendTo("chat_id", "oc_team")))
	replied, _ := p.Route(request("POST", base+"/om_1/reply"))
	if s, r := sent.Rules[len(sent.Rules)-1], replied.Rules[len(replied.Rules)-1]; s.String() != r.String() ||
		sent.Scope(scopekind.Entity) != replied.Scope(scopekind.Entity) {
		t.Errorf("send %v %q, reply %v %q: want the same chat rule and scope", s, sent.Scope(scopekind.Entity), r, replied.Scope(scopekind.Entity))
	}
}

// No message ID reaches a key or a scope, learned or not.
func TestRepliesKeepMessageIDsOut(t *testing.T) {
	p := testProfile(t, Config{Apps: []App{{}}})
	routedClassify(p, request("POST", "https://open.feishu.cn/open-apis/im/v1/messages?receive_id_type=chat_id&receive_id=oc_team"),
		response(200, nil, answer("om_secret1", "oc_team", "")))
	for _, id := range []string{"om_secret1", "om_secret2"} {
		r, _ := p.Route(request("POST", "https://open.feishu.cn/open-apis/im/v1/messages/"+id+"/reply"))
		for _, rule := range r.Rules {
			if strings.Contains(rule.String(), "secret") || strings.Contains(rule.String(), "oc_team") {
				t.Errorf("rule %v names an ID", rule)
			}
		}
		for _, s := range r.Scopes {
			if strings.Contains(s, "secret") || strings.Contains(s, "oc_team") {
				t.Errorf("scope %q names an ID", s)
			}
		}
	}
}

// BenchmarkRouteReply routes a reply to a message whose chat an answer
// named, and to one the preset never saw, with a full memory.
func BenchmarkRouteReply(b *testing.B) {
	p := testProfile(b, Config{Apps: []App{{}}})
	for i := range messageMemory {
		send := request("POST", "https://open.feishu.cn/open-apis/im/v1/messages?receive_id_type=chat_id&receive_id=oc_team")
		routedClassify(p, send, response(200, nil, answer(fmt.Sprintf("om_%032x", i), "oc_team", "")))
	}
	for _, tc := range []struct{ name, id string }{
		{"learned", fmt.Sprintf("om_%032x", messageMemory-1)},
		{"unknown", "om_dc13264520392913993dd051dba21dcf"},
	} {
		req := request("POST", "https://open.feishu.cn/open-apis/im/v1/messages/"+tc.id+"/reply")
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := p.Route(req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkLearnFromSendAnswer classifies a send's successful answer, which
// teaches the message's chat, against the same answer with PerChat off,
// which teaches nothing.
func BenchmarkLearnFromSendAnswer(b *testing.B) {
	req := request("POST", "https://open.feishu.cn/open-apis/im/v1/messages?receive_id_type=chat_id&receive_id=oc_team")
	body := answer("om_dc13264520392913993dd051dba21dcf", "oc_team", strings.Repeat("x", 200))
	for _, tc := range []struct {
		name    string
		perChat int
	}{{"learns", 0}, {"PerChat off", -1}} {
		p := testProfile(b, Config{Apps: []App{{PerChat: tc.perChat}}})
		route, _ := p.Route(req)
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
					ContentLength: int64(len(body)), Body: io.NopCloser(strings.NewReader(body))}
				if v := p.Classify(req, resp, &route); v.Kind != providers.OK {
					b.Fatal(v)
				}
			}
		})
	}
}

// A reply whose context names its chat counts against that chat, unless the
// preset learned the message's chat already.
func TestReplyInChat(t *testing.T) {
	p := testProfile(t, Config{Apps: []App{{}}})
	const base = "https://open.feishu.cn/open-apis/im/v1/messages"
	routedClassify(p, request("POST", base+"?receive_id_type=open_id&receive_id=ou_ann"), response(200, nil, answer("om_1", "oc_p2p", "")))
	for _, tc := range []struct {
		name, id, chat, want string
	}{
		{"named", "om_0", "oc_team", hashID("chat_id", "oc_team")},
		{"empty", "om_0", "", hashID("message", "om_0")},
		{"learned first", "om_1", "oc_p2p", hashID("open_id", "ou_ann")},
	} {
		req := request("POST", base+"/"+tc.id+"/reply")
		req = req.WithContext(ReplyInChat(req.Context(), tc.chat))
		r, err := p.Route(req)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.Scope(scopekind.Entity); got != scopekind.Of(scopekind.Entity, app+":chat#"+tc.want) {
			t.Errorf("%s: scope %q, want chat key %s", tc.name, got, tc.want)
		}
	}
}

// FuzzLearn feeds any answer of the APIs that teach: no panic, the caller
// reads the answer byte for byte, and a reply after it routes.
func FuzzLearn(f *testing.F) {
	f.Add(0, []byte(answer("om_1", "oc_1", "x")))
	f.Add(3, []byte(`{"code":0,"data":{"items":[{"message_id":"om_1","chat_id":"oc_1"}]}}`))
	f.Add(2, []byte(`{"code":0,"data":{"message":{"message_id":"om_1","chat_id":"oc_1"}}}`))
	targets := []struct{ method, url string }{
		{"POST", "https://open.feishu.cn/open-apis/im/v1/messages?receive_id_type=chat_id&receive_id=oc_1"},
		{"POST", "https://open.feishu.cn/open-apis/im/v1/messages/om_1/reply"},
		{"POST", "https://open.feishu.cn/open-apis/im/v1/messages/merge_forward?receive_id_type=chat_id&receive_id=oc_1"},
		{"GET", "https://open.feishu.cn/open-apis/im/v1/messages/om_1"},
	}
	p := testProfile(f, Config{Apps: []App{{}}})
	f.Fuzz(func(t *testing.T, target int, body []byte) {
		tg := targets[uint(target)%uint(len(targets))]
		resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
			ContentLength: -1, Body: io.NopCloser(strings.NewReader(string(body)))}
		routedClassify(p, request(tg.method, tg.url), resp)
		if got, err := io.ReadAll(resp.Body); err != nil || string(got) != string(body) {
			t.Fatalf("body reads %q, %v; want %q", got, err, body)
		}
		if _, err := p.Route(request("POST", "https://open.feishu.cn/open-apis/im/v1/messages/om_1/reply")); err != nil {
			t.Fatal(err)
		}
	})
}

// Every app and tenant of a Preset learns into one bounded memory (it was
// one memory of 65,536 per app and tenant, and a preset kept per tenant
// ever seen: a store app's heap grew without end), keyed by app, so one
// tenant never reads another's chats.
func TestTenantsShareOneMemoryKeyedByApp(t *testing.T) {
	set := MustNew(Config{Apps: []App{{AppID: "cli_store"}}})
	prof := set.Profile()
	const base = "https://open.feishu.cn/open-apis/im/v1/messages"
	as := func(r *http.Request, tenant string) *http.Request {
		return r.WithContext(apps.NewContext(r.Context(), apps.App{ID: "cli_store", Org: tenant}))
	}
	chatOf := func(tenant string) string {
		rt, err := prof.Route(as(request("POST", base+"/om_1/reply"), tenant))
		if err != nil {
			t.Fatal(err)
		}
		return rt.Scope(scopekind.Entity)
	}
	for i, tenant := range []string{"t1", "t2"} {
		send := as(request("POST", base+"?receive_id_type=chat_id&receive_id=oc_"+tenant), tenant)
		routedClassify(prof, send, response(200, nil, answer("om_1", "oc_"+tenant, "")))
		if n := set.memory.len(); n != i+1 {
			t.Fatalf("after tenant %s: %d messages in the Preset's memory, want %d", tenant, n, i+1)
		}
	}
	if a, b := chatOf("t1"), chatOf("t2"); a == b {
		t.Fatalf("both tenants' replies to om_1 count against %q: one read the other's chat", a)
	}
}
