package tokens

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/providers/wechat/wechattest"
)

// WeChat's stable_token repeats the same token with what is left of it,
// and renews it 5 minutes before its end: it never tells less than 300 s,
// and silenceper caches a stable token for what it is told less 300 s. A
// repeat fetched late in the token's life (900 s left) was kept with a
// quarter of its lifetime as margin and handed out down to 225 s; it is
// now passed on as WeChat gave it and not kept, so the next exchange gets
// WeChat's own answer. The emulator and the Sharers share one moved
// clock; the kept answer is deleted where Redis would have expired it.
func TestNearEndRepeatIsNotKept(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	var off atomic.Int64
	base := time.Now()
	clock := func() time.Time { return base.Add(time.Duration(off.Load())) }
	emu := wechattest.NewServer(wechattest.Options{Apps: map[string]string{"wxA": secret}, Clock: clock})
	t.Cleanup(emu.Close)
	var clients []*http.Client
	for range 3 {
		s, err := New(rdb, WithPrefix("nearend"), WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, &http.Client{Transport: s.Wrap(http.DefaultTransport)})
	}
	exchange := func(c *http.Client) (token string, told int64) {
		t.Helper()
		resp, err := c.Post(emu.URL+"/cgi-bin/stable_token", "application/json",
			strings.NewReader(`{"grant_type":"client_credential","appid":"wxA","secret":"`+secret+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var a struct {
			AccessToken string `json:"access_token"`
			ExpiresIn   int64  `json:"expires_in"`
		}
		if err := json.Unmarshal(raw, &a); err != nil || a.AccessToken == "" {
			t.Fatalf("answer %q: %v", raw, err)
		}
		return a.AccessToken, a.ExpiresIn
	}
	expireKept := func() {
		t.Helper()
		keys, err := rdb.Keys(context.Background(), "nearend:token:*").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if !strings.HasSuffix(k, ":lock") && !strings.HasSuffix(k, ":heal") {
				rdb.Del(context.Background(), k)
			}
		}
	}
	first, _ := exchange(clients[0])
	off.Store(int64(6300 * time.Second)) // 900 s left: the kept answer ended at 1,800
	expireKept()
	if tok, told := exchange(clients[1]); tok != first || told > 900 {
		t.Fatalf("WeChat's repeat at 900 s left: %d s (same token: %v)", told, tok == first)
	}
	off.Store(int64(6950 * time.Second)) // 250 s left: WeChat renews
	if _, told := exchange(clients[2]); told < 300 {
		t.Fatalf("an SDK was told %d s of a stable token; WeChat never tells less than 300 s", told)
	}
}

// WeCom calls an invalid suite token 40082 (42009 is an expired one), and
// Feishu an invalid app_access_token 99991664: a kept token answered so is
// healed, where 40082 used to leave it handed out until its kept answer
// ended.
func TestSuiteTokenCalledInvalidHeals(t *testing.T) {
	var mu sync.Mutex
	issued, dead := 0, map[string]bool{}
	wecom := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch r.URL.Path {
		case "/cgi-bin/service/get_suite_token":
			issued++
			fmt.Fprintf(w, `{"errcode":0,"errmsg":"ok","suite_access_token":"SUITETOKEN-%04d","expires_in":7200}`, issued)
		case "/cgi-bin/service/get_corp_token":
			if dead[r.URL.Query().Get("suite_access_token")] {
				fmt.Fprint(w, `{"errcode":40082,"errmsg":"invalid suite_token"}`)
				return
			}
			fmt.Fprint(w, `{"errcode":0,"errmsg":"ok","access_token":"CORPTOKEN-0001","expires_in":7200}`)
		}
	}))
	t.Cleanup(wecom.Close)
	s, err := New(redistest.Start(t).Client(t), WithPrefix("suite40082"))
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: s.Wrap(http.DefaultTransport)}
	post := jsonPoster(t, c, wecom.URL)
	suiteToken := func(ticket string) string {
		t.Helper()
		tok, _ := post("/cgi-bin/service/get_suite_token", `{"suite_id":"s1","suite_secret":"SUITE-SECRET-1","suite_ticket":"`+ticket+`"}`)["suite_access_token"].(string)
		return tok
	}
	first := suiteToken("t1")
	mu.Lock()
	dead[first] = true
	mu.Unlock()
	post("/cgi-bin/service/get_corp_token?suite_access_token="+url.QueryEscape(first), `{"auth_corpid":"ww2","permanent_code":"P"}`)
	if again := suiteToken("t2"); again == first || s.Stats().Healed != 1 {
		t.Fatalf("after WeCom's 40082 the fleet hands out %s again (healed %d)", again, s.Stats().Healed)
	}
	if !invalidToken(feishu, http.StatusBadRequest, []byte(`{"code":99991664,"msg":"invalid app access token"}`)) {
		t.Error("Feishu's 99991664 (an invalid app_access_token) is not an invalid-token answer")
	}
}
