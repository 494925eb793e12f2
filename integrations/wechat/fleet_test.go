package wechat_test

import (
	"context"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	sdk "github.com/silenceper/wechat/v2"
	"github.com/silenceper/wechat/v2/cache"
	miniconfig "github.com/silenceper/wechat/v2/miniprogram/config"
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
	envKind    = "THROTTLE_FLEET_KIND"
)

// fleetAccounts are the two accounts of each kind of fleet: official
// accounts, or mini programs (whose SDK fetches its token at the same
// /cgi-bin/token).
var fleetAccounts = map[string]map[string]string{
	"official": {"wx1111111111111111": "FLEETSECRET-a61f", "wx2222222222222222": "FLEETSECRET-b7c0"},
	"mini":     {"wx3333333333333333": "FLEETSECRET-c2d4", "wx4444444444444444": "FLEETSECRET-e8f6"},
}

// fleetTransport is one replica's Transport: the WeChat preset for both
// accounts, on the shared Redis, sharing token exchanges by default.
func fleetTransport(rdb redis.UniversalClient, prefix, emuURL, kind string) *throttle.Transport {
	var accounts []presetwechat.App
	for id := range fleetAccounts[kind] {
		accounts = append(accounts, presetwechat.App{AppID: id})
	}
	return throttle.MustNew(append([]throttle.Option{
		throttle.WithLimiter(limiter.MustNewShared(rdb, limiter.SharedConfig{Prefix: prefix})),
		throttle.WithBase(sdktest.Redirect(emuURL)),
		throttle.WithProfiles(presetwechat.MustNew(presetwechat.Config{Apps: accounts}).Profile()),
	}, sdktest.FleetOptions()...)...)
}

// Six processes of silenceper/wechat/v2, two accounts, each replica
// recreating its clients ten times: at most one /cgi-bin/token fetch per
// account at WeChat for the whole fleet, and no invalid-token answer. A
// token revoked at WeChat mid-run heals with exactly one more fetch.
//
// Each replica fetching for itself (before, THROTTLE_FLEET_UNSHARED),
// WeChat's new token on every fetch invalidates the others': 40001 answers
// across the fleet.
func TestFleetSharesTokens(t *testing.T) { runFleet(t, "official") }

// TestFleetSharesTokensMiniProgram is TestFleetSharesTokens with the SDK's
// mini program client: two mini programs, each replica's calls
// URLLink.Query.
func TestFleetSharesTokensMiniProgram(t *testing.T) { runFleet(t, "mini") }

// runFleet runs the fleet of kind "official" or "mini".
func runFleet(t *testing.T, kind string) {
	if os.Getenv(envReplica) != "" {
		t.Skip("run by the replicas themselves")
	}
	accounts := fleetAccounts[kind]
	ids := slices.Sorted(maps.Keys(accounts))
	first, second := ids[0], ids[1]
	srv := redistest.Start(t)
	emu := wechattest.NewServer(wechattest.Options{
		Apps: accounts,
		// WeChat keeps a replaced token working 5 minutes; 1 ms here, so
		// that the run shows replicas invalidating one another if they do.
		TokenGrace: time.Millisecond,
	})
	defer emu.Close()
	prefix := "fleet" + strconv.FormatInt(time.Now().UnixNano(), 36)

	start := time.Now()
	wg := startReplicas(t, emu.URL, srv.Addr, prefix, kind)
	// Mid-run, revoke the token the fleet shares for the first account, as
	// a reset in WeChat's console does. The token is read as any replica
	// would: an exchange through a Transport on the fleet's Redis.
	rdb := srv.Client(t)
	tr := fleetTransport(rdb, prefix, emu.URL, kind)
	defer tr.Close()
	time.Sleep(fleetRounds / 2 * fleetPeriod) // pacing the run, not synchronisation
	revokedAt := time.Now()
	req, _ := http.NewRequest(http.MethodGet, "https://api.weixin.qq.com/cgi-bin/token?grant_type=client_credential&appid="+first+"&secret="+accounts[first], nil)
	revoked := sdktest.Token(t, tr, req, "access_token")
	emu.Revoke(revoked)
	wg.Wait()
	took := time.Since(start)
	invalidBefore, invalidAfter := sdktest.Split(emu.Requests(), revokedAt, func(r wechattest.Request) (time.Time, bool) {
		return r.At, r.Code == wechattest.CodeInvalidToken || r.Code == wechattest.CodeExpiredToken
	})
	t.Logf("%d replicas x %d restarts x %d %s accounts in %v (shared tokens %v): fetches %s %d, %s %d; invalid-token answers %d before the revocation, %d after",
		fleetReplicas, fleetRounds, len(accounts), kind, took.Round(time.Millisecond), !sdktest.Unshared(),
		first, emu.Fetches(first, "/cgi-bin/token"), second, emu.Fetches(second, "/cgi-bin/token"),
		invalidBefore, invalidAfter)
	if sdktest.Unshared() {
		return
	}
	if invalidBefore != 0 {
		t.Errorf("%d invalid-token answers before the revocation, want 0", invalidBefore)
	}
	if n := emu.Fetches(first, "/cgi-bin/token"); n != 2 {
		t.Errorf("%s: %d token fetches, want 2 (one, and one to heal the revoked token)", first, n)
	}
	if n := emu.Fetches(second, "/cgi-bin/token"); n != 1 {
		t.Errorf("%s: %d token fetches, want 1", second, n)
	}
	noCredentialInRedis(t, rdb, prefix, revoked, accounts[first], accounts[second])
}

// startReplicas starts the fleet's replicas, each a process running
// TestFleetReplica; wait for them on the group returned.
func startReplicas(t *testing.T, emuURL, redisAddr, prefix, kind string) *sync.WaitGroup {
	var wg sync.WaitGroup
	for i := range fleetReplicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(os.Args[0], "-test.run=^TestFleetReplica$", "-test.count=1")
			cmd.Env = append(os.Environ(), envReplica+"="+strconv.Itoa(i), envEmu+"="+emuURL,
				envRedis+"="+redisAddr, envPrefix+"="+prefix, envKind+"="+kind)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("replica %d: %v\n%s", i, err, out)
			}
		}()
	}
	return &wg
}

// noCredentialInRedis fails the test when a key or value under prefix
// holds one of secrets in clear.
func noCredentialInRedis(t *testing.T, rdb redis.UniversalClient, prefix string, secrets ...string) {
	keys, err := rdb.Keys(context.Background(), prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		v, _ := rdb.Dump(context.Background(), k).Result()
		for _, s := range secrets {
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
	kind := os.Getenv(envKind)
	tr := fleetTransport(rdb, os.Getenv(envPrefix), os.Getenv(envEmu), kind)
	defer tr.Close()
	wechat.Use(tr)
	start := time.Now()
	for round := range fleetRounds {
		for id, secret := range fleetAccounts[kind] {
			// A restart: a new client with an empty token cache. Errors
			// (40001 after the revocation) are counted at the emulator.
			if kind == "mini" {
				links := sdk.NewWechat().GetMiniProgram(&miniconfig.Config{
					AppID: id, AppSecret: secret, Cache: cache.NewMemory(),
				}).GetURLLink()
				for range 3 {
					_, _ = links.Query("https://wxaurl.cn/fleet")
				}
				continue
			}
			user := sdk.NewWechat().GetOfficialAccount(&offconfig.Config{
				AppID: id, AppSecret: secret, Cache: cache.NewMemory(),
			}).GetUser()
			for range 3 {
				_, _ = user.GetUserInfo(openID)
			}
		}
		// The next restart is due one period after the last.
		time.Sleep(time.Until(start.Add(time.Duration(round+1) * fleetPeriod)))
	}
}
