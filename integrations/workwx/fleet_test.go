package workwx_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/integrations/internal/sdktest"
	"github.com/quotaware/throttle/integrations/workwx"
	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/providers/wecom"
	"github.com/quotaware/throttle/providers/wecom/wecomtest"
)

// Six replicas (go-workwx takes a client per instance: one Transport per
// replica, in one process), two companies, each replica recreating its
// clients every 200 ms for 2 s (production's 2 s for 20 s, time-scaled):
// one gettoken per company at WeCom for the fleet and no invalid-token
// answer; a token WeCom invalidates mid-run heals with one more gettoken.
func TestFleetSharesTokens(t *testing.T) {
	const (
		replicas = 6
		rounds   = 10
		period   = 200 * time.Millisecond
	)
	corps := map[string]string{"wwAAAAAAAAAAAAAAAA": "FLEETSECRET-c31e", "wwBBBBBBBBBBBBBBBB": "FLEETSECRET-d9a4"}
	emuCorps := map[string][]string{}
	var cfgs []wecom.App
	for id, secret := range corps {
		emuCorps[id] = []string{secret}
		cfgs = append(cfgs, wecom.App{CorpID: id})
	}
	emu := wecomtest.NewServer(wecomtest.Options{Corps: emuCorps})
	defer emu.Close()
	srv := redistest.Start(t)
	prefix := "fleet" + strconv.FormatInt(time.Now().UnixNano(), 36)
	set := wecom.MustNew(wecom.Config{Apps: cfgs})
	var transports []*throttle.Transport
	for range replicas + 1 { // the last one reads the token to revoke
		tr := throttle.MustNew(append([]throttle.Option{
			throttle.WithLimiter(limiter.MustNewShared(srv.Client(t), limiter.SharedConfig{Prefix: prefix})),
			throttle.WithBase(sdktest.Redirect(emu.URL)), throttle.WithProfiles(set.Profile()),
		}, sdktest.FleetOptions()...)...)
		t.Cleanup(func() { tr.Close() })
		transports = append(transports, tr)
	}

	start := time.Now()
	var wg sync.WaitGroup
	for r := range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := range rounds {
				for id, secret := range corps {
					app := workwx.New(id, transports[r]).WithApp(secret, agentID) // a restart
					for range 3 {
						_, _ = app.GetUser("zhangsan") // errors are counted at the emulator
					}
				}
				time.Sleep(time.Until(start.Add(time.Duration(round+1) * period))) // pacing, not synchronisation
			}
		}()
	}
	const first = "wwAAAAAAAAAAAAAAAA"
	time.Sleep(rounds / 2 * period) // mid-run
	revokedAt := time.Now()
	resp, err := (&http.Client{Transport: transports[replicas]}).Get(
		"https://qyapi.weixin.qq.com/cgi-bin/gettoken?corpid=" + first + "&corpsecret=" + corps[first])
	if err != nil {
		t.Fatal(err)
	}
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&tok)
	resp.Body.Close()
	emu.Revoke(tok.AccessToken)
	wg.Wait()

	fetches := map[string]int{}
	invalidBefore, invalidAfter := 0, 0
	for _, r := range emu.Requests() {
		switch {
		case r.Path == "/cgi-bin/gettoken" && r.Code == 0:
			fetches[r.App]++
		case r.Code == wecomtest.CodeBadToken || r.Code == wecomtest.CodeExpiredToken:
			if r.At.Before(revokedAt) {
				invalidBefore++
			} else {
				invalidAfter++
			}
		}
	}
	t.Logf("%d replicas x %d restarts x %d companies in %v (shared tokens %v): gettoken %v; invalid-token answers %d before the revocation, %d after",
		replicas, rounds, len(corps), time.Since(start).Round(time.Millisecond), !sdktest.Unshared(), fetches, invalidBefore, invalidAfter)
	if sdktest.Unshared() {
		return
	}
	if invalidBefore != 0 {
		t.Errorf("%d invalid-token answers before the revocation, want 0", invalidBefore)
	}
	if fetches[first] != 2 || fetches["wwBBBBBBBBBBBBBBBB"] != 1 {
		t.Errorf("gettoken per company %v, want 2 for %s (one to heal) and 1 for the other", fetches, first)
	}
}
