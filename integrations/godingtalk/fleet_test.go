package godingtalk_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle/integrations/godingtalk"
	"github.com/quotaware/throttle/integrations/internal/sdktest"
	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/providers/dingtalk"
	"github.com/quotaware/throttle/providers/dingtalk/dingtalktest"
)

// Six replicas (godingtalk takes a client per instance: one Transport per
// replica, in one process), two apps, each replica recreating its clients
// with an empty token cache every 200 ms for 2 s (production's 2 s for 20
// s, time-scaled): one gettoken per app at DingTalk for the fleet and no
// invalid-token answer; a token revoked mid-run (a reset secret) heals
// with one more gettoken.
//
// DingTalk returns the same token within its lifetime, so replicas
// fetching for themselves (THROTTLE_FLEET_UNSHARED) invalidate nothing:
// they spend the exchange's limits, one gettoken per restart.
func TestFleetSharesTokens(t *testing.T) {
	const first, second = "dingfleetappaaaa", "dingfleetappbbbb"
	apps := map[string]string{first: "FLEETSECRET-7d2e", second: "FLEETSECRET-91fc"}
	// Apps of the exclusive edition (60 calls/s per API): six replicas
	// restarting every 200 ms call each API 30 times a second per app.
	emu := dingtalktest.New(dingtalktest.Options{Apps: apps, QPS: 60})
	defer emu.Close()
	srv := redistest.Start(t)
	prefix := "fleet" + strconv.FormatInt(time.Now().UnixNano(), 36)
	set := dingtalk.MustNew(dingtalk.Config{Apps: []dingtalk.App{
		{AppKey: first, Edition: dingtalk.Exclusive}, {AppKey: second, Edition: dingtalk.Exclusive}}})
	fleet := sdktest.Fleet{Replicas: 6, Rounds: 10, Period: 200 * time.Millisecond}
	// The last Transport reads the token to revoke.
	transports := sdktest.Transports(t, fleet.Replicas+1, func() redis.UniversalClient { return srv.Client(t) }, prefix, emu.URL, set.Profile())

	start := time.Now()
	revokedAt := fleet.Run(func(r int) {
		for id, secret := range apps {
			c := godingtalk.NewClient(id, secret, transports[r]) // a restart
			if c.RefreshAccessToken(true) != nil {
				continue // counted at the emulator
			}
			_, _ = c.UserInfoByUserId("manager4220") // errors are counted at the emulator
		}
	}, func() {
		req, _ := http.NewRequest(http.MethodGet, "https://oapi.dingtalk.com/gettoken?corpid="+first+"&corpsecret="+apps[first], nil)
		emu.Revoke(sdktest.Token(t, transports[fleet.Replicas], req, "access_token"))
	})
	invalidBefore, invalidAfter := sdktest.Split(emu.Requests(), revokedAt, func(r dingtalktest.Record) (time.Time, bool) {
		return r.At, r.Code == "40014" || r.Code == "InvalidAuthentication"
	})
	t.Logf("%d replicas x %d restarts x %d apps in %v (shared tokens %v): gettoken %s %d, %s %d; invalid-token answers %d before the revocation, %d after",
		fleet.Replicas, fleet.Rounds, len(apps), time.Since(start).Round(time.Millisecond), !sdktest.Unshared(),
		first, emu.Fetches(first, ""), second, emu.Fetches(second, ""), invalidBefore, invalidAfter)
	if sdktest.Unshared() {
		return
	}
	if invalidBefore != 0 {
		t.Errorf("%d invalid-token answers before the revocation, want 0", invalidBefore)
	}
	if emu.Fetches(first, "") != 2 || emu.Fetches(second, "") != 1 {
		t.Errorf("gettoken %d and %d, want 2 for %s (one to heal) and 1 for %s", emu.Fetches(first, ""), emu.Fetches(second, ""), first, second)
	}
}
