package godingtalk_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/integrations/godingtalk"
	"github.com/quotaware/throttle/integrations/internal/sdktest"
	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter"
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
	var transports []*throttle.Transport
	for range fleet.Replicas + 1 { // the last one reads the token to revoke
		opts := append([]throttle.Option{
			throttle.WithLimiter(limiter.MustNewShared(srv.Client(t), limiter.SharedConfig{Prefix: prefix})),
			throttle.WithBase(sdktest.Redirect(emu.URL)), throttle.WithProfiles(set.Profile()),
		}, sdktest.FleetOptions()...)
		tr := throttle.MustNew(opts...)
		t.Cleanup(func() { tr.Close() })
		transports = append(transports, tr)
	}

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
		resp, err := (&http.Client{Transport: transports[fleet.Replicas]}).Get(
			"https://oapi.dingtalk.com/gettoken?corpid=" + first + "&corpsecret=" + apps[first])
		if err != nil {
			t.Error(err)
			return
		}
		var tok struct {
			AccessToken string `json:"access_token"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&tok)
		resp.Body.Close()
		emu.Revoke(tok.AccessToken)
	})

	invalidBefore, invalidAfter := 0, 0
	for _, r := range emu.Requests() {
		if r.Code == "40014" || r.Code == "InvalidAuthentication" {
			if r.At.Before(revokedAt) {
				invalidBefore++
			} else {
				invalidAfter++
			}
		}
	}
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
