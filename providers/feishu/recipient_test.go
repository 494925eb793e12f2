package feishu

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
	"unicode/utf8"

	"github.com/quotaware/throttle/providers/internal/entityhash"
)

// chatKeys returns the per-recipient rule keys of a send's route.
func chatKeys(t *testing.T, cfg Config, target string, body io.Reader) []string {
	t.Helper()
	p := testProfile(t, cfg)
	req, err := http.NewRequest(http.MethodPost, target, body)
	if err != nil {
		t.Fatal(err)
	}
	r, err := p.Route(req)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, rl := range r.Rules {
		if k := rl.Key(); strings.HasPrefix(k, "chat:") {
			keys = append(keys, strings.TrimPrefix(k, "chat:"+app+":"))
		}
	}
	return keys
}

// However a body names its recipient (late, after a long content; with its
// key escaped or in another case; twice), the send is charged to every
// chat a decoder could read from it, and a body not read whole is also
// charged to the unknown recipient, never to it alone.
func TestRecipientsOfEveryBody(t *testing.T) {
	const target = "https://open.feishu.cn/open-apis/im/v1/messages?receive_id_type=chat_id"
	busy := hashID("chat_id", "oc_busy")
	other := hashID("chat_id", "oc_other")
	// encoding/json writes a map's keys in order: content before receive_id.
	late, _ := json.Marshal(map[string]string{"content": strings.Repeat("x", 5<<10), "msg_type": "text", "receive_id": "oc_busy"})
	tests := []struct {
		name string
		cfg  Config
		body io.Reader
		want []string
	}{
		{"first", Config{Apps: []App{{}}}, strings.NewReader(`{"receive_id":"oc_busy","msg_type":"text"}`), []string{busy}},
		{"after 5 KiB of content", Config{Apps: []App{{}}}, strings.NewReader(string(late)), []string{busy}},
		{"key in another case", Config{Apps: []App{{}}}, strings.NewReader(`{"Receive_ID":"oc_busy"}`), []string{busy}},
		{"escaped key", Config{Apps: []App{{}}}, strings.NewReader(`{"receive\u005fid":"oc_busy"}`), []string{busy}},
		{"twice", Config{Apps: []App{{}}}, strings.NewReader(`{"receive_id":"oc_other","receive_id":"oc_busy"}`), []string{other, busy}},
		{"twice, the same", Config{Apps: []App{{}}}, strings.NewReader(`{"receive_id":"oc_busy","x":1,"receive_id":"oc_busy"}`), []string{busy}},
		{"past a small limit", Config{ChatPeekLimit: 64, Apps: []App{{}}}, strings.NewReader(`{"receive_id":"oc_busy","content":"` + strings.Repeat("y", 100) + `"}`),
			[]string{busy, unknownRecipient}},
		{"cut by a read error", Config{Apps: []App{{}}}, io.MultiReader(strings.NewReader(`{"receive_id":"oc_busy","content":"`), iotest.ErrReader(errors.New("reset"))),
			[]string{busy, unknownRecipient}},
		{"not JSON", Config{Apps: []App{{}}}, strings.NewReader(`receive_id=oc_busy`), []string{unknownRecipient}},
		{"a number", Config{Apps: []App{{}}}, strings.NewReader(`{"receive_id":7}`), []string{unknownRecipient}},
		{"none", Config{Apps: []App{{}}}, strings.NewReader(`{"msg_type":"text"}`), []string{unknownRecipient}},
		{"in the query and the body", Config{Apps: []App{{}}}, strings.NewReader(`{"receive_id":"oc_busy"}`), []string{other, busy}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tgt := target
			if strings.Contains(tc.name, "query") {
				tgt += "&receive_id=oc_other"
			}
			if got := chatKeys(t, tc.cfg, tgt, tc.body); !slices.Equal(got, tc.want) {
				t.Errorf("chat keys %q, want %q", got, tc.want)
			}
		})
	}
	// An email address names one person whatever its case.
	a := chatKeys(t, Config{Apps: []App{{}}}, "https://open.feishu.cn/open-apis/im/v1/messages?receive_id_type=email", strings.NewReader(`{"receive_id":"Alice@Example.com"}`))
	b := chatKeys(t, Config{Apps: []App{{}}}, "https://open.feishu.cn/open-apis/im/v1/messages?receive_id_type=email", strings.NewReader(`{"receive_id":"alice@example.com"}`))
	if !slices.Equal(a, b) {
		t.Errorf("Alice@Example.com %q and alice@example.com %q have different keys", a, b)
	}
}

// Whatever the body, the recipient Go's encoding/json reads from it (as a
// server written in Go would, and as the emulator does) is among the keys
// the send is charged to, or the send is charged to the unknown recipient.
func FuzzRecipient(f *testing.F) {
	f.Add(`{"receive_id":"oc_1"}`, 4096)
	f.Add(`{"content":"x","RECEIVE_ID":"oc_1"}`, 64)
	f.Add(`{"receive_id":"oc_1","receive\u005fid":"oc_2"}`, 4096)
	f.Add(`{"receive_id":"oc_1","x":{"receive_id":"oc_3"}}`, 100)
	f.Add(`{"a":[1,2,{"b":"}"}],"receive_id":"oc_2"}`, 4096)
	f.Fuzz(func(t *testing.T, body string, limit int) {
		limit = 64 + abs(limit)%8192
		var m struct {
			ReceiveID string `json:"receive_id"`
		}
		if !utf8.ValidString(body) || json.Unmarshal([]byte(body), &m) != nil || m.ReceiveID == "" {
			return
		}
		keys := chatKeys(t, Config{ChatPeekLimit: limit, Apps: []App{{}}}, "https://open.feishu.cn/open-apis/im/v1/messages?receive_id_type=chat_id", strings.NewReader(body))
		if !slices.Contains(keys, hashID("chat_id", m.ReceiveID)) && !slices.Contains(keys, unknownRecipient) {
			t.Fatalf("body %q reaches %q, charged to %q only", body, m.ReceiveID, keys)
		}
	})
}

func abs(n int) int {
	if n < 0 {
		return -(n + 1)
	}
	return n
}

// hashID is the preset's name of a recipient under the default key, for
// the profiles testProfile builds (AppID app, no EntityKey).
func hashID(kind, id string) string { return entityhash.New("", app).Sum(kind, id) }

// Recipients are named by a hash keyed with EntityKey: a reader of Redis
// who guesses an email cannot check the guess without the key.
func TestRecipientHashIsKeyed(t *testing.T) {
	const target = "https://open.feishu.cn/open-apis/im/v1/messages?receive_id_type=email"
	body := `{"receive_id":"alice@example.com"}`
	k1 := chatKeys(t, Config{EntityKey: "k1", Apps: []App{{}}}, target, strings.NewReader(body))
	k2 := chatKeys(t, Config{EntityKey: "k2", Apps: []App{{}}}, target, strings.NewReader(body))
	again := chatKeys(t, Config{EntityKey: "k1", Apps: []App{{}}}, target, strings.NewReader(body))
	if len(k1) != 1 || k1[0] == k2[0] || k1[0] != again[0] {
		t.Fatalf("keys under k1 %q, k2 %q, k1 again %q: want one per key, stable", k1, k2, again)
	}
	for _, unkeyed := range []string{"email\x00alice@example.com", "alice@example.com"} {
		sum := sha256.Sum256([]byte(unkeyed))
		if strings.Contains(k1[0], hex.EncodeToString(sum[:12])) || k1[0] == hex.EncodeToString(sum[:12]) {
			t.Errorf("key %q is an unkeyed SHA-256 of %q", k1[0], unkeyed)
		}
	}
}
