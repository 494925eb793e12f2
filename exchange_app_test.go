package throttle_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/providers/dingtalk"
	"github.com/quotaware/throttle/providers/dingtalk/dingtalktest"
	"github.com/quotaware/throttle/providers/wechat"
	"github.com/quotaware/throttle/providers/wechat/wechattest"
)

// Each WeChat account's /cgi-bin/token quota is its own: with three
// accounts of 3 fetches a day each, every account fetches its 3 tokens and
// is refused its 4th, whatever the others did. Charged to the shared
// unknown scope (before), the second account's first fetch was refused.
func TestExchangeChargedToItsWeChatAccount(t *testing.T) {
	emu := wechattest.NewServer(wechattest.Options{})
	defer emu.Close()
	u, _ := url.Parse(emu.URL)
	quota := func() map[string]int { return map[string]int{"/cgi-bin/token": 3} }
	accounts := []string{"wxA0000000000001", "wxB0000000000002", "wxC0000000000003"}
	cfg := wechat.Config{Hosts: []string{u.Hostname()}, Unknown: wechat.App{Daily: quota(), NoDefaultQuotas: true}}
	for _, a := range accounts {
		cfg.Apps = append(cfg.Apps, wechat.App{AppID: a, Daily: quota(), NoDefaultQuotas: true})
	}
	set := wechat.MustNew(cfg)
	tr := throttle.MustNew(throttle.WithProfiles(set.Profile()), throttle.WithMaxWait(50*time.Millisecond))
	defer tr.Close()
	client := &http.Client{Transport: tr}

	for _, a := range accounts {
		for i := range 4 {
			resp, err := client.Get(emu.URL + "/cgi-bin/token?grant_type=client_credential&appid=" + a + "&secret=s3cret")
			if i < 3 {
				if err != nil {
					t.Fatalf("%s fetch %d refused within its own quota: %v", a, i+1, err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if !strings.Contains(string(b), "access_token") {
					t.Fatalf("%s fetch %d: %s", a, i+1, b)
				}
				continue
			}
			if err == nil {
				resp.Body.Close()
				t.Fatalf("%s fetch 4 was sent beyond its quota of 3", a)
			}
		}
	}
	byApp := map[string]int{}
	for _, r := range emu.Requests() {
		byApp[r.App]++
	}
	for _, a := range accounts {
		if byApp[a] != 3 {
			t.Errorf("emulator saw %d fetches of %s, want 3 (all: %v)", byApp[a], a, byApp)
		}
	}
}

// A DingTalk ISV fetching the tokens of 40 orgs at once charges each
// fetch to its org, not one shared scope: 40 calls, none waits (a budget of
// 300 ms refuses none). Charged to one scope (before), they queued behind
// one another: about 1 s for the last, so the budget refused some.
func TestExchangeChargedToItsDingTalkOrg(t *testing.T) {
	emu := dingtalktest.New(dingtalktest.Options{Suites: map[string]string{"suiteS": "SUITESECRET"}})
	defer emu.Close()
	set := dingtalk.MustNew(dingtalk.Config{
		Hosts: []string{emu.Host()},
		Apps:  []dingtalk.App{{AppKey: "suiteS", ISV: true}},
	})
	tr := throttle.MustNew(throttle.WithProfiles(set.Profile()), throttle.WithMaxWait(300*time.Millisecond))
	defer tr.Close()
	client := &http.Client{Transport: tr}

	const orgs = 40
	start := time.Now()
	var wg sync.WaitGroup
	var failed atomic.Int32
	for i := range orgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf(`{"suiteKey":"suiteS","suiteSecret":"SUITESECRET","authCorpId":"corp%02d","suiteTicket":"T"}`, i)
			req, _ := http.NewRequestWithContext(context.Background(), "POST", emu.URL+"/v1.0/oauth2/corpAccessToken", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				failed.Add(1) // refused by the Transport: its wait exceeds the budget
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !strings.Contains(string(b), "accessToken") {
				failed.Add(1)
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	refused := 0
	recs := emu.Requests()
	for _, r := range recs {
		if r.Status != http.StatusOK || r.Code != "" {
			refused++
		}
	}
	t.Logf("%d orgs: %d calls, %d refused by the provider, %d without a token, %v", orgs, len(recs), refused, failed.Load(), took.Round(10*time.Millisecond))
	if failed.Load() != 0 || len(recs) != orgs || refused != 0 {
		t.Errorf("%d orgs without a token; %d calls (want %d), %d refused by the provider (want 0)", failed.Load(), len(recs), orgs, refused)
	}
}
