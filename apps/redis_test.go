package apps_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quotaware/throttle/apps"
	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter/limitertest"
	"github.com/quotaware/throttle/providers"
)

// Two replicas on one Redis: what one learns from an exchange, the other
// knows, with the token's lifetime, and neither the token nor the secret
// is anywhere in Redis.
func TestReplicasShareWhatTheyLearn(t *testing.T) {
	srv := redistest.Shared(t)
	prefix := limitertest.Group(t)
	ctx := context.Background()
	a := apps.MustNew(apps.WithRedis(srv.Client(t), testKey), apps.WithPrefix(prefix))
	b := apps.MustNew(apps.WithRedis(srv.Client(t), testKey), apps.WithPrefix(prefix))

	const token, secret = "TOKEN-0f3c9a", "SECRET-77ab1"
	emu := exchangeServer(t, `{"accessToken":"`+token+`","expireIn":7200}`)
	client := &http.Client{Transport: a.Observe(http.DefaultTransport)}
	resp, err := client.Post(emu.URL+"/v1.0/oauth2/corpAccessToken", "application/json",
		strings.NewReader(`{"suiteKey":"suiteS","suiteSecret":"`+secret+`","authCorpId":"org1","suiteTicket":"tk"}`))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	got, ok := b.Lookup(ctx, token)
	want := providers.App{Provider: "dingtalk", ID: "suiteS", Org: "org1", Learned: true}
	if !ok || got != want {
		t.Fatalf("the other replica: Lookup = %+v, %v; want %+v", got, ok, want)
	}
	if s := b.Stats(); s.RedisLookups != 1 || s.RedisFound != 1 {
		t.Errorf("the other replica: %d Redis lookups, %d found; want 1, 1", s.RedisLookups, s.RedisFound)
	}
	// The second lookup is local: no Redis call.
	if _, ok := b.Lookup(ctx, token); !ok || b.Stats().RedisLookups != 1 {
		t.Errorf("a known token asked Redis again (%d lookups)", b.Stats().RedisLookups)
	}

	rdb := srv.Client(t)
	keys, err := rdb.Keys(ctx, prefix+":*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("keys under the prefix: %q, %v; want one", keys, err)
	}
	val, _ := rdb.Get(ctx, keys[0]).Result()
	ttl, _ := rdb.TTL(ctx, keys[0]).Result()
	if ttl < 7100*time.Second || ttl > 7200*time.Second {
		t.Errorf("the entry expires in %v, want the token's 7200 s", ttl)
	}
	for _, s := range []string{keys[0], val} {
		for _, cred := range []string{token, secret, strings.ToLower(token)} {
			if strings.Contains(s, cred) {
				t.Errorf("Redis holds a credential: %q contains %q", s, cred)
			}
		}
	}
}

// A replica whose key differs learns nothing from the others: the key is
// what makes a hash unguessable, and replicas must share it.
func TestAnotherKeyReadsNothing(t *testing.T) {
	srv := redistest.Shared(t)
	prefix := limitertest.Group(t)
	ctx := context.Background()
	a := apps.MustNew(apps.WithRedis(srv.Client(t), testKey), apps.WithPrefix(prefix))
	b := apps.MustNew(apps.WithRedis(srv.Client(t), []byte("another-key-0123456789")), apps.WithPrefix(prefix))
	if err := a.Learn(ctx, "tok", providers.App{Provider: "wechat", ID: "wxA"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.Lookup(ctx, "tok"); ok {
		t.Fatal("a replica with another key read the entry")
	}
}

// An unknown token asks Redis once, then is remembered as unknown for the
// negative TTL.
func TestUnknownTokenAsksRedisOnce(t *testing.T) {
	srv := redistest.Shared(t)
	b := apps.MustNew(apps.WithRedis(srv.Client(t), testKey), apps.WithPrefix(limitertest.Group(t)), apps.WithNegativeTTL(time.Minute))
	for range 100 {
		if _, ok := b.Lookup(context.Background(), "nobody-knows"); ok {
			t.Fatal("unknown token found")
		}
	}
	if n := b.Stats().RedisLookups; n != 1 {
		t.Fatalf("%d Redis lookups for one unknown token, want 1", n)
	}
}

// With Redis down, a lookup gives up within its timeout, the token stays
// unknown for the negative TTL without asking again, and what this replica
// learns itself still works locally.
func TestRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	b := apps.MustNew(apps.WithRedis(rdb, testKey), apps.WithPrefix(limitertest.Group(t)),
		apps.WithRedisTimeout(100*time.Millisecond), apps.WithNegativeTTL(time.Minute))
	srv.Stop()
	ctx := context.Background()
	if _, ok := b.Lookup(ctx, "someone-elses"); ok {
		t.Fatal("found a token with Redis down")
	}
	if _, ok := b.Lookup(ctx, "someone-elses"); ok {
		t.Fatal("found a token with Redis down")
	}
	if s := b.Stats(); s.RedisLookups != 1 || s.RedisErrors != 1 {
		t.Fatalf("%d Redis lookups, %d errors; want 1 and 1 (the second lookup answered from memory)", s.RedisLookups, s.RedisErrors)
	}
	if err := b.Learn(ctx, "mine", providers.App{Provider: "wechat", ID: "wxA"}, time.Hour); err == nil {
		t.Error("Learn reported no error with Redis down")
	}
	if app, ok := b.Lookup(ctx, "mine"); !ok || app.ID != "wxA" {
		t.Fatalf("a token learned here: %+v, %v; want wxA", app, ok)
	}
}
