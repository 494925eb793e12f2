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
)

// Two replicas on one Redis: what one learns from an exchange, the other
// hears at once (the announcement) or, when it starts later, reads from
// Redis, with the token's lifetime; neither the token nor the secret is
// anywhere in Redis.
func TestReplicasShareWhatTheyLearn(t *testing.T) {
	srv := redistest.Shared(t)
	prefix := limitertest.Group(t)
	ctx := context.Background()
	book := func() *apps.Book {
		b := apps.MustNew(withLoopback(apps.Config{Redis: srv.Client(t), Key: testKey, Prefix: prefix}))
		t.Cleanup(func() { b.Close() })
		return b
	}
	a, listening := book(), book()

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
	want := apps.App{Provider: "dingtalk", ID: "suiteS", Org: "org1", Learned: true}

	// The replica that was listening hears it (asynchronously).
	deadline := time.Now().Add(5 * time.Second)
	for listening.Stats().Heard == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	got, ok := listening.Lookup(ctx, token)
	if !ok || got != want || listening.Stats().RedisLookups != 0 {
		t.Fatalf("the listening replica: Lookup = %+v, %v after %d Redis lookups; want %+v from the announcement", got, ok, listening.Stats().RedisLookups, want)
	}

	// A replica started later reads it from Redis, once.
	late := book()
	got, ok = late.Lookup(ctx, token)
	if !ok || got != want {
		t.Fatalf("the late replica: Lookup = %+v, %v; want %+v", got, ok, want)
	}
	if _, ok := late.Lookup(ctx, token); !ok || late.Stats().RedisLookups != 1 || late.Stats().RedisFound != 1 {
		t.Errorf("the late replica: %d Redis lookups, %d found; want 1, 1", late.Stats().RedisLookups, late.Stats().RedisFound)
	}

	rdb := srv.Client(t)
	keys, err := rdb.Keys(ctx, prefix+":*").Result()
	var entries, places []string
	for _, k := range keys {
		if strings.HasPrefix(k, prefix+":app:") {
			entries = append(entries, k)
		}
		v, _ := rdb.Get(ctx, k).Result()
		places = append(places, k, v)
	}
	if err != nil || len(entries) != 1 {
		t.Fatalf("entries under the prefix: %q (of %q), %v; want one", entries, keys, err)
	}
	ttl, _ := rdb.TTL(ctx, entries[0]).Result()
	if ttl < 7100*time.Second || ttl > 7200*time.Second {
		t.Errorf("the entry expires in %v, want the token's 7200 s", ttl)
	}
	for _, s := range places {
		for _, cred := range []string{token, secret, strings.ToLower(token), string(testKey)} {
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
	a := apps.MustNew(apps.Config{Redis: srv.Client(t), Key: testKey, Prefix: prefix})
	b := apps.MustNew(apps.Config{Redis: srv.Client(t), Key: []byte("another-key-0123456789"), Prefix: prefix})
	defer a.Close()
	defer b.Close()
	if err := a.Learn(ctx, "tok", apps.App{Provider: "wechat", ID: "wxA"}, time.Hour); err != nil {
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
	b := apps.MustNew(apps.Config{Redis: srv.Client(t), Key: testKey, Prefix: limitertest.Group(t), NegativeTTL: time.Minute})
	defer b.Close()
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
	b := apps.MustNew(apps.Config{Redis: rdb, Key: testKey, Prefix: limitertest.Group(t), RedisTimeout: 100 * time.Millisecond, NegativeTTL: time.Minute})
	defer b.Close()
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
	if err := b.Learn(ctx, "mine", apps.App{Provider: "wechat", ID: "wxA"}, time.Hour); err == nil {
		t.Error("Learn reported no error with Redis down")
	}
	if app, ok := b.Lookup(ctx, "mine"); !ok || app.ID != "wxA" {
		t.Fatalf("a token learned here: %+v, %v; want wxA", app, ok)
	}
}
