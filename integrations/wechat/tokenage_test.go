package wechat_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	redisv8 "github.com/go-redis/redis/v8"
	"github.com/redis/go-redis/v9"
	sdk "github.com/silenceper/wechat/v2"
	"github.com/silenceper/wechat/v2/cache"
	offconfig "github.com/silenceper/wechat/v2/officialaccount/config"
	"github.com/silenceper/wechat/v2/util"

	"github.com/quotaware/throttle/integrations/internal/sdktest"
	"github.com/quotaware/throttle/integrations/wechat"
	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/internal/tokens"
	"github.com/quotaware/throttle/providers/wechat/wechattest"
)

// silenceper/wechat caches a /cgi-bin/token answer for expires_in less
// 1,500 s. A fleet's SDK caches all lapse together, 5,700 s after the
// fleet's fetch, and exchange again: told what is left of the shared token
// then (1,500 s), the SDK cached it for no time, and with its Redis cache
// every call failed ("invalid expire time in 'setex'") for the token's last
// 20 minutes; with its memory cache every call exchanged. The kept answer
// is now handed out only while 30 minutes are left, so at any age of the
// fleet's token the SDK caches a token for a positive time and exchanges
// once. The Sharer's clock is moved to age the kept answer; WeChat's
// tokens (the emulator's) stay valid in real time.
func TestSDKCachesTheSharedTokenAtEveryAge(t *testing.T) {
	prev := util.DefaultHTTPClient
	t.Cleanup(func() { util.DefaultHTTPClient = prev })
	emu := wechattest.NewServer(wechattest.Options{Apps: map[string]string{appID: appSecret}})
	t.Cleanup(emu.Close)
	srv := redistest.Start(t)
	var offset atomic.Int64
	sharer, err := tokens.New(srv.Client(t), tokens.WithPrefix("age"), tokens.WithClock(func() time.Time {
		return time.Now().Add(time.Duration(offset.Load()))
	}))
	if err != nil {
		t.Fatal(err)
	}
	wechat.Use(sharer.Wrap(sdktest.Redirect(emu.URL)))
	sdkKeys := redis.NewClient(&redis.Options{Addr: srv.Addr, DB: 1})
	t.Cleanup(func() { sdkKeys.Close() })
	// The SDK's Redis cache on a client of its own go-redis (v8), closed
	// with the test.
	sdkConn := redisv8.NewClient(&redisv8.Options{Addr: srv.Addr, DB: 1})
	t.Cleanup(func() { sdkConn.Close() })
	redisCache := &cache.Redis{}
	redisCache.SetConn(sdkConn)
	redisCache.SetRedisCtx(context.Background())
	ctx := context.Background()
	for _, age := range []time.Duration{0, 3000 * time.Second, 5390 * time.Second, 5410 * time.Second,
		5700 * time.Second, 6000 * time.Second, 6899 * time.Second, 7000 * time.Second} {
		offset.Store(int64(age))
		// The SDK's cache entry has lapsed (or the replica restarted):
		// it exchanges again, then serves 20 calls from its cache.
		if err := sdkKeys.FlushDB(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		for name, c := range map[string]cache.Cache{"redis": redisCache, "memory": cache.NewMemory()} {
			before := sharer.Stats()
			user := sdk.NewWechat().GetOfficialAccount(&offconfig.Config{AppID: appID, AppSecret: appSecret, Cache: c}).GetUser()
			for i := range 20 {
				if _, err := user.GetUserInfo(openID); err != nil {
					t.Fatalf("fleet's token %v old, %s cache, call %d: %v", age, name, i, err)
				}
			}
			after := sharer.Stats()
			if n := after.Shared + after.Fetched - before.Shared - before.Fetched; n != 1 {
				t.Errorf("fleet's token %v old, %s cache: 20 calls made %d exchanges, want 1", age, name, n)
			}
		}
	}
}
