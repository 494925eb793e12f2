package wechat_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	sdk "github.com/silenceper/wechat/v2"
	"github.com/silenceper/wechat/v2/cache"
	offconfig "github.com/silenceper/wechat/v2/officialaccount/config"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/integrations/internal/sdktest"
	"github.com/quotaware/throttle/integrations/wechat"
	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter"
	presetwechat "github.com/quotaware/throttle/providers/wechat"
	"github.com/quotaware/throttle/providers/wechat/wechattest"
)

// The fleet: replicas are processes (the SDK takes only the process-wide
// util.DefaultHTTPClient), each recreating its SDK clients, with a fresh
// in-memory token cache, every period for rounds periods: 2 s for 20 s in
// production, time-scaled here to 200 ms for 2 s.
const (
	fleetReplicas = 6
	fleetRounds   = 10
	fleetPeriod   = 200 * time.Millisecond

	envReplica = "THROTTLE_FLEET_REPLICA"
	envEmu     = "THROTTLE_FLEET_EMULATOR"
	envRedis   = "THROTTLE_FLEET_REDIS"
	envPrefix  = "THROTTLE_FLEET_PREFIX"
)

var fleetAccounts = map[string]string{"wx1111111111111111": "FLEETSECRET-a61f", "wx2222222222222222": "FLEETSECRET-b7c0"}

// fleetTransport is one replica's Transport: the WeChat preset for both
// accounts, on the shared Redis, sharing token exchanges by default.
func fleetTransport(rdb redis.UniversalClient, prefix, emuURL string) *throttle.Transport {
	var accounts []presetwechat.App
	for id := range fleetAccounts {
		accounts = append(accounts, presetwechat.App{AppID: id})
	}
	return throttle.MustNew(
		throttle.WithLimiter(limiter.MustNewShared(rdb, limiter.SharedConfig{Prefix: prefix})),
		throttle.WithBase(sdktest.Redirect(emuURL)),
		throttle.WithProfiles(presetwechat.MustNew(presetwechat.Config{Apps: accounts}).Profile()),
	)
}

// Six processes of silenceper/wechat/v2, two accounts, each replica
// recreating its clients ten times: at most one /cgi-bin/token fetch per
// account at WeChat for the whole fleet, and no invalid-token answer. A
// token revoked at WeChat mid-run heals with exactly one more fetch.
//
// Each replica fetching for itself (before), WeChat's new token on every
// fetch invalidates the others': 40001 answers across the fleet.
func TestFleetSharesTokens(t *testing.T) {
	if os.Getenv(envReplica) != "" {
		t.Skip("run by the replicas themselves")
	}
	srv := redistest.Start(t)
	emu := wechattest.NewServer(wechattest.Options{
		Apps: fleetAccounts,
		// WeChat keeps a replaced token working 5 minutes; 1 ms here, so
		// that the run shows replicas invalidating one another if they do.
		TokenGrace: time.Millisecond,
	})
	defer emu.Close()
	prefix := "fleet" + strconv.FormatInt(time.Now().UnixNano(), 36)

	start := time.Now()
	var wg sync.WaitGroup
	for i := range fleetReplicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(os.Args[0], "-test.run=^TestFleetReplica$", "-test.count=1")
			cmd.Env = append(os.Environ(), envReplica+"="+strconv.Itoa(i), envEmu+"="+emu.URL,
				envRedis+"="+srv.Addr, envPrefix+"="+prefix)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("replica %d: %v\n%s", i, err, out)
			}
		}()
	}

	// Mid-run, revoke the token the fleet shares for the first account, as
	// a reset in WeChat's console does. The token is read as any replica
	// would: an exchange through a Transport on the fleet's Redis.
	var revoked string
	const first = "wx1111111111111111"
	rdb := srv.Client(t)
	c := &http.Client{Transport: fleetTransport(rdb, prefix, emu.URL)}
	time.Sleep(fleetRounds / 2 * fleetPeriod) // pacing the run, not synchronisation
	revokedAt := time.Now()
	resp, err := c.Get("https://api.weixin.qq.com/cgi-bin/token?grant_type=client_credential&appid=" + first + "&secret=" + fleetAccounts[first])
	if err != nil {
		t.Fatal(err)
	}
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&tok)
	resp.Body.Close()
	revoked = tok.AccessToken
	emu.Revoke(revoked)
	wg.Wait()
	took := time.Since(start)

	invalidBefore, invalidAfter := 0, 0
	for _, r := range emu.Requests() {
		if r.Code == wechattest.CodeInvalidToken || r.Code == wechattest.CodeExpiredToken {
			if r.At.Before(revokedAt) {
				invalidBefore++
			} else {
				invalidAfter++
			}
		}
	}
	t.Logf("%d replicas x %d restarts x %d accounts in %v: fetches %s %d, %s %d; invalid-token answers %d before the revocation, %d after",
		fleetReplicas, fleetRounds, len(fleetAccounts), took.Round(time.Millisecond),
		first, emu.Fetches(first, "/cgi-bin/token"), "wx2222222222222222", emu.Fetches("wx2222222222222222", "/cgi-bin/token"),
		invalidBefore, invalidAfter)
	if invalidBefore != 0 {
		t.Errorf("%d invalid-token answers before the revocation, want 0", invalidBefore)
	}
	if n := emu.Fetches(first, "/cgi-bin/token"); n != 2 {
		t.Errorf("%s: %d token fetches, want 2 (one, and one to heal the revoked token)", first, n)
	}
	if n := emu.Fetches("wx2222222222222222", "/cgi-bin/token"); n != 1 {
		t.Errorf("wx2222222222222222: %d token fetches, want 1", n)
	}
	// Nothing in Redis holds a token or a secret in clear.
	keys, err := rdb.Keys(context.Background(), prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		v, _ := rdb.Dump(context.Background(), k).Result()
		for _, s := range []string{revoked, fleetAccounts[first], fleetAccounts["wx2222222222222222"]} {
			if s != "" && (strings.Contains(k, s) || strings.Contains(v, s)) {
				t.Errorf("Redis key %q holds a credential in clear", k)
			}
		}
	}
}

// TestFleetReplica is one replica of TestFleetSharesTokens, in its own
// process.
func TestFleetReplica(t *testing.T) {
	if os.Getenv(envReplica) == "" {
		t.Skip("a replica of TestFleetSharesTokens")
	}
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv(envRedis)})
	defer rdb.Close()
	tr := fleetTransport(rdb, os.Getenv(envPrefix), os.Getenv(envEmu))
	defer tr.Close()
	wechat.Use(tr)
	start := time.Now()
	for round := range fleetRounds {
		for id, secret := range fleetAccounts {
			// A restart: a new client with an empty token cache.
			user := sdk.NewWechat().GetOfficialAccount(&offconfig.Config{
				AppID: id, AppSecret: secret, Cache: cache.NewMemory(),
			}).GetUser()
			for range 3 {
				_, _ = user.GetUserInfo(openID) // 40001 after the revocation; counted at the emulator
			}
		}
		// The next restart is due one period after the last.
		time.Sleep(time.Until(start.Add(time.Duration(round+1) * fleetPeriod)))
	}
}
