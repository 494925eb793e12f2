package throttle_test

import (
	"context"
	"net/http"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/apps"
	"github.com/quotaware/throttle/providers/dingtalk"
	"github.com/quotaware/throttle/providers/wechat"
)

// A service calling DingTalk as two apps and as a suite installed in many
// customer orgs, and WeChat as several accounts, from several replicas. The
// README's section on several apps is an excerpt of this function.
func Example_severalApps() {
	rdb := redis.NewClient(&redis.Options{Addr: "redis:6379", ContextTimeoutEnabled: true})
	hmacKey := []byte("the same 32 random bytes on every replica")
	accounts := []wechat.App{{AppID: "wx1"}, {AppID: "wx2"}}
	ctx := context.Background()

	dt := dingtalk.MustNew(dingtalk.Config{
		Apps: []dingtalk.App{
			{AppKey: "dingStandard"},
			{AppKey: "dingPro", Edition: dingtalk.Professional},
			{AppKey: "suiteKey", ISV: true}, // its customer orgs are learned from their tokens
		},
		// Default: "dingStandard", // unknown tokens: this app; empty: a shared conservative scope
	})
	client := &http.Client{Transport: throttle.MustNew(
		throttle.WithRedis(rdb),
		// Every replica shares the key (keep it with the apps' secrets).
		throttle.WithApps(apps.Config{Key: hmacKey}),
		throttle.WithProfiles(dt.Profile(), wechat.MustNew(wechat.Config{Apps: accounts}).Profile()),
	)}
	dt.Add(dingtalk.App{AppKey: "dingNew"}) // while running; a new customer org needs nothing

	// A caller that knows better says so; it wins over what was learned:
	ctx = throttle.ContextWithApp(ctx, "dingPro")                 // or
	ctx = throttle.ContextWithTenant(ctx, "suiteKey", "dingcorp") // an ISV suite in one customer org

	_, _ = client, ctx // hand the client to the SDKs, the context to the calls
}
