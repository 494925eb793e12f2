package apps_test

import (
	"net/http"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle"
	"github.com/quotaware/throttle/apps"
	"github.com/quotaware/throttle/providers/dingtalk"
)

// A service calling DingTalk as two apps and as a suite installed in many
// customer orgs, from several replicas: each replica's Transport learns the
// app and org of every token its SDKs fetch, and reads from Redis the ones
// other replicas fetched.
func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: "redis:6379", ContextTimeoutEnabled: true})
	hmacKey := []byte("the same 32 random bytes on every replica") // keep it with the apps' secrets
	set := dingtalk.MustNew(dingtalk.Config{Apps: []dingtalk.App{{AppKey: "dingStandard"}, {AppKey: "dingPro", Edition: dingtalk.Professional}, {AppKey: "suiteKey", ISV: true}}})
	client := &http.Client{Transport: throttle.MustNew(
		throttle.WithRedis(rdb),
		throttle.WithApps(apps.Config{Key: hmacKey}), // on the Transport's Redis
		throttle.WithProfiles(set.Profile()),
	)}
	_ = client // hand it to the SDKs
}
