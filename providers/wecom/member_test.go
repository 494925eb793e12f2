package wecom

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/quotaware/throttle/providers/internal/entityhash"
)

// memberKeys returns the member and broadcast rule keys of an app message,
// less their prefix, each once (the minute's).
func memberKeys(t *testing.T, cfg Config, body string) []string {
	t.Helper()
	p := testProfile(t, cfg, nil)
	req, _ := http.NewRequest(http.MethodPost, "https://qyapi.weixin.qq.com"+memberAPI+"?access_token=T", strings.NewReader(body))
	r, err := p.Route(req)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, rl := range r.Rules {
		if k, ok := strings.CutPrefix(rl.Key(), "member:m:ww0123456789abcdef:"); ok {
			keys = append(keys, k)
		}
	}
	return keys
}

// However a message addresses a member, it is charged to that member's
// rules, or to the broadcast share that every member's rules leave room
// for, or both; never to a key of its own.
func TestMemberKeysOfEveryAddress(t *testing.T) {
	alice := "1000002:" + memberHashOf("alice")
	long := strings.Repeat("x", 5<<10)
	tests := []struct {
		name string
		cfg  Config
		body string
		want []string
	}{
		{"alice", Config{Apps: []App{{}}}, `{"touser":"alice","agentid":1000002}`, []string{alice}},
		{"Alice", Config{Apps: []App{{}}}, `{"touser":" Alice ","agentid":"1000002"}`, []string{alice}},
		{"agentid after 5 KiB", Config{Apps: []App{{}}}, `{"touser":"alice","text":{"content":"` + long + `"},"agentid":1000002}`, []string{alice}},
		{"twice", Config{Apps: []App{{}}}, `{"touser":"alice|ALICE","agentid":1000002}`, []string{alice}},
		{"key in another case", Config{Apps: []App{{}}}, `{"ToUser":"alice","AgentID":1000002}`, []string{alice}},
		{"@all", Config{Apps: []App{{}}}, `{"touser":"@all","agentid":1000002}`, []string{broadcast}},
		{"alice and @all", Config{Apps: []App{{}}}, `{"touser":"alice|@all","agentid":1000002}`, []string{alice, broadcast}},
		{"a party", Config{Apps: []App{{}}}, `{"touser":"alice","toparty":"7","agentid":1000002}`, []string{alice, broadcast}},
		{"an empty tag", Config{Apps: []App{{}}}, `{"touser":"alice","totag":"","agentid":1000002}`, []string{alice}},
		{"no agentid", Config{Apps: []App{{}}}, `{"touser":"alice"}`, []string{broadcast}},
		{"two agentids", Config{Apps: []App{{}}}, `{"touser":"alice","agentid":1000002,"agentid":1000003}`, []string{broadcast}},
		{"not read whole", Config{MemberPeekLimit: 64, Apps: []App{{}}}, `{"touser":"alice","agentid":1000002,"text":{"content":"` + long + `"}}`,
			[]string{alice, broadcast}},
		{"not JSON", Config{Apps: []App{{}}}, `touser=alice`, []string{broadcast}},
		{"nine members", Config{Apps: []App{{}}}, `{"touser":"a|b|c|d|e|f|g|h|i","agentid":1}`, []string{broadcast}},
		{"member limits off", Config{Apps: []App{{NoPerMemberLimit: true}}}, `{"touser":"alice|@all","agentid":1000002}`, nil},
		{"member limits given, then off", Config{Apps: []App{{PerMemberPerMinute: 10, PerMemberPerHour: 100, NoPerMemberLimit: true}}},
			`{"touser":"alice","agentid":1000002}`, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := memberKeys(t, tc.cfg, tc.body); !slices.Equal(got, tc.want) {
				t.Errorf("keys %q, want %q", got, tc.want)
			}
		})
	}
}

// The named members and the broadcast share one member's limits.
func TestMemberAndBroadcastShareTheLimit(t *testing.T) {
	p := testProfile(t, Config{Apps: []App{{}}}, nil)
	req, _ := http.NewRequest(http.MethodPost, "https://qyapi.weixin.qq.com"+memberAPI, strings.NewReader(`{"touser":"alice|@all","agentid":1}`))
	r, err := p.Route(req)
	if err != nil {
		t.Fatal(err)
	}
	perMinute, perHour := 0, 0
	for _, rl := range r.Rules {
		switch {
		case strings.HasPrefix(rl.Key(), "member:m:"):
			perMinute += rl.Limit()
		case strings.HasPrefix(rl.Key(), "member:h:"):
			perHour += rl.Limit()
		}
	}
	if perMinute != defaultPerMemberPerMinute || perHour != defaultPerMemberPerHour {
		t.Errorf("member + broadcast allow %d a minute and %d an hour, want %d and %d",
			perMinute, perHour, defaultPerMemberPerMinute, defaultPerMemberPerHour)
	}
	for _, c := range []App{{BroadcastPerMinute: 30}, {BroadcastPerHour: -2}, {PerMemberPerMinute: 10, BroadcastPerMinute: 10}} {
		c.CorpID = "ww1"
		if _, err := New(Config{Apps: []App{c}}); err == nil || !strings.Contains(err.Error(), "App.Broadcast") {
			t.Errorf("%+v: %v, want an error naming the Broadcast field", c, err)
		}
	}
}

// Whatever the body, every member Go's encoding/json reads from touser (as
// a server written in Go would, and as the emulator does) is charged, under
// the agentid it reads, or the message is charged to the broadcast share.
func FuzzMemberKeys(f *testing.F) {
	f.Add(`{"touser":"alice","agentid":1000002}`, 4096)
	f.Add(`{"ToUser":"Alice|bob","agentid":"7","AGENTID":8}`, 64)
	f.Add(`{"touser":"a","touser":"b","agentid":1}`, 4096)
	f.Add(`{"text":{"touser":"x"},"touser":"alice","agentid":01}`, 100)
	f.Add(`{"touser":"0|   |0","Agentid":0}`, 4096)
	f.Fuzz(func(t *testing.T, body string, limit int) {
		limit = 64 + abs(limit)%8192
		var m struct {
			ToUser  string `json:"touser"`
			AgentID int64  `json:"agentid"`
		}
		if !utf8.ValidString(body) || json.Unmarshal([]byte(body), &m) != nil || m.ToUser == "" {
			return
		}
		keys := memberKeys(t, Config{MemberPeekLimit: limit, Apps: []App{{}}}, body)
		if slices.Contains(keys, broadcast) {
			return
		}
		for _, member := range strings.Split(m.ToUser, "|") {
			// Spaces alone name no member (WeCom trims user IDs).
			if strings.TrimSpace(member) == "" || member == "@all" {
				continue
			}
			want := fmt.Sprintf("%d:%s", m.AgentID, memberHashOf(normalMember(member)))
			if !slices.Contains(keys, want) {
				t.Fatalf("body %q reaches %q of app %d, charged to %q only", body, member, m.AgentID, keys)
			}
		}
	})
}

func abs(n int) int {
	if n < 0 {
		return -(n + 1)
	}
	return n
}

// memberHashOf is the preset's name of a member under the default key, for
// the profiles testProfile builds (CorpID ww0123456789abcdef, no EntityKey).
func memberHashOf(m string) string { return entityhash.New("", "ww0123456789abcdef").Sum("member", m) }

// Members are named by a hash keyed with EntityKey, never by an unkeyed
// SHA-256 of the UserID that a dictionary reverses.
func TestMemberHashIsKeyed(t *testing.T) {
	body := `{"touser":"alice","agentid":1}`
	k1 := memberKeys(t, Config{EntityKey: "k1", Apps: []App{{}}}, body)
	k2 := memberKeys(t, Config{EntityKey: "k2", Apps: []App{{}}}, body)
	if len(k1) != 1 || k1[0] == k2[0] {
		t.Fatalf("keys under k1 %q and k2 %q: want one per key", k1, k2)
	}
	sum := sha256.Sum256([]byte("alice"))
	if strings.Contains(k1[0], hex.EncodeToString(sum[:12])) {
		t.Errorf("key %q is the unkeyed SHA-256 of the UserID", k1[0])
	}
}
