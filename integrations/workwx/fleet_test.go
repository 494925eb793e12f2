package workwx_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle/integrations/internal/sdktest"
	"github.com/quotaware/throttle/integrations/workwx"
	"github.com/quotaware/throttle/internal/redistest"
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
	// The last Transport reads the token to revoke.
	transports := sdktest.Transports(t, replicas+1, func() redis.UniversalClient { return srv.Client(t) }, prefix, emu.URL, set.Profile())

	const first = "wwAAAAAAAAAAAAAAAA"
	start := time.Now()
	revokedAt := sdktest.Fleet{Replicas: replicas, Rounds: rounds, Period: period}.Run(func(r int) {
		for id, secret := range corps {
			app := workwx.New(id, transports[r]).WithApp(secret, agentID) // a restart
			for range 3 {
				_, _ = app.GetUser("zhangsan") // errors are counted at the emulator
			}
		}
	}, func() {
		req, _ := http.NewRequest(http.MethodGet, "https://qyapi.weixin.qq.com/cgi-bin/gettoken?corpid="+first+"&corpsecret="+corps[first], nil)
		emu.Revoke(sdktest.Token(t, transports[replicas], req, "access_token"))
	})
	invalidBefore, invalidAfter := sdktest.Split(emu.Requests(), revokedAt, func(r wecomtest.Request) (time.Time, bool) {
		return r.At, r.Code == wecomtest.CodeBadToken || r.Code == wecomtest.CodeExpiredToken
	})
	fetches := map[string]int{}
	for _, r := range emu.Requests() {
		if r.Path == "/cgi-bin/gettoken" && r.Code == 0 {
			fetches[r.App]++
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
