package lark_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	sdklark "github.com/larksuite/oapi-sdk-go/v3"
	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle/integrations/internal/sdktest"
	"github.com/quotaware/throttle/integrations/lark"
	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/providers/feishu"
	"github.com/quotaware/throttle/providers/feishu/feishutest"
)

// processCache is the SDK's token cache of one process: a restart starts
// with an empty one. (The SDK's default cache is package-wide, which would
// make every client of this test process one replica.)
type processCache struct {
	mu sync.Mutex
	m  map[string]string
}

func (c *processCache) Set(_ context.Context, k, v string, _ time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]string{}
	}
	c.m[k] = v
	return nil
}

func (c *processCache) Get(_ context.Context, k string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[k], nil
}

// Six replicas (one Transport each, in one process, taking turns), two apps, each
// replica recreating its clients with an empty token cache every 200 ms for
// 2 s (production's 2 s for 20 s, time-scaled): one tenant_access_token
// exchange per app at Feishu for the fleet and no invalid-token answer; a
// token revoked mid-run heals with one more exchange.
func TestFleetSharesTokens(t *testing.T) {
	const (
		replicas = 6
		rounds   = 10
		period   = 200 * time.Millisecond
		first    = "cli_fleet0000000a"
	)
	apps := map[string]string{first: "FLEETSECRET-e5f1", "cli_fleet0000000b": "FLEETSECRET-0ab2"}
	emu := feishutest.NewServer(feishutest.Options{Apps: apps})
	defer emu.Close()
	var cfgs []feishu.App
	for id := range apps {
		cfgs = append(cfgs, feishu.App{AppID: id})
	}
	set := feishu.MustNew(feishu.Config{Apps: cfgs})
	srv := redistest.Start(t)
	prefix := "fleet" + strconv.FormatInt(time.Now().UnixNano(), 36)
	// The last Transport reads the token to revoke.
	transports := sdktest.Transports(t, replicas+1, func() redis.UniversalClient { return srv.Client(t) }, prefix, emu.URL, set.Profile())

	// The SDK keeps package-wide state that NewClient writes and every
	// client reads (core.NewCache, the token manager): the replicas take
	// turns in one goroutine (a fleet of one driver), each restart still a
	// new client with an empty cache on its own Transport. Concurrent
	// replicas are the WeChat test's, as processes.
	start := time.Now()
	revokedAt := sdktest.Fleet{Replicas: 1, Rounds: rounds, Period: period}.Run(func(int) {
		for r := range replicas {
			for id, secret := range apps {
				c := lark.NewClient(id, secret, transports[r], sdklark.WithTokenCache(&processCache{})) // a restart
				for range 3 {
					_ = getUser(c) // errors are counted at the emulator
				}
			}
		}
	}, func() {
		req, _ := http.NewRequest(http.MethodPost, "https://open.feishu.cn/open-apis/auth/v3/tenant_access_token/internal",
			strings.NewReader(`{"app_id":"`+first+`","app_secret":"`+apps[first]+`"}`))
		req.Header.Set("Content-Type", "application/json")
		emu.Revoke(sdktest.Token(t, transports[replicas], req, "tenant_access_token"))
	})
	invalidBefore, invalidAfter := sdktest.Split(emu.Requests(), revokedAt, func(r feishutest.Request) (time.Time, bool) {
		return r.At, r.Code == feishutest.CodeTokenInvalid || r.Code == feishutest.CodeTokenExpired
	})
	t.Logf("%d replicas x %d restarts x %d apps in %v (shared tokens %v): exchanges %s %d, other %d; invalid-token answers %d before the revocation, %d after",
		replicas, rounds, len(apps), time.Since(start).Round(time.Millisecond), !sdktest.Unshared(), first, emu.Fetches(first),
		emu.Fetches("cli_fleet0000000b"), invalidBefore, invalidAfter)
	if sdktest.Unshared() {
		return
	}
	if invalidBefore != 0 {
		t.Errorf("%d invalid-token answers before the revocation, want 0", invalidBefore)
	}
	if emu.Fetches(first) != 2 || emu.Fetches("cli_fleet0000000b") != 1 {
		t.Errorf("exchanges %d and %d, want 2 (one to heal) and 1", emu.Fetches(first), emu.Fetches("cli_fleet0000000b"))
	}
}
