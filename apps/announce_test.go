package apps_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quotaware/throttle/apps"
	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter/limitertest"
)

// hashOf is the hex of a token's entry name under testKey, as an attacker
// who knows the token and the key (or reads the channel) would write it.
func hashOf(token string) string {
	m := hmac.New(sha256.New, testKey)
	m.Write([]byte(token))
	return hex.EncodeToString(m.Sum(nil)[:16])
}

// waitProcessed waits until the Book has dealt with n announcements.
func waitProcessed(t *testing.T, b *apps.Book, n int64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for processed(b) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d announcements processed after 20 s, want %d (%+v)", processed(b), n, b.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Issue 22.1: one message with a hash longer than 32 hex digits panicked
// the subscriber goroutine, ending the process. Every malformed message is
// counted and dropped; the Book keeps listening.
func TestMalformedAnnouncementsAreDropped(t *testing.T) {
	srv := redistest.Shared(t)
	prefix := limitertest.Group(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	b := apps.MustNew(apps.Config{Redis: rdb, Key: testKey, Prefix: prefix})
	defer b.Close()
	h := hashOf("whatever-token")
	bad := []string{
		h + "abcd 7200000 wechat\x1fwxA\x1f", // 34 hex digits: the crash
		strings.Repeat("ab", 64) + " 1 a\x1fb\x1f",
		"", " ", "zz 1 a\x1fb\x1f", h[:31] + "g",
		h + strings.Repeat("x", 4096), // over the size bound
	}
	for _, m := range bad {
		if err := rdb.Publish(ctx, prefix+":apps", m).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// A real announcement after them is still heard.
	other := apps.MustNew(apps.Config{Redis: rdb, Key: testKey, Prefix: prefix})
	defer other.Close()
	if err := other.Learn(ctx, "a-real-token-1", apps.App{Provider: "wechat", ID: "wxA"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	waitProcessed(t, b, int64(len(bad))+1)
	if s := b.Stats(); s.Heard != 1 || s.Tokens != 1 {
		t.Fatalf("heard %d, holds %d tokens; want the one real announcement only (%+v)", s.Heard, s.Tokens, s)
	}
	if app, ok := b.Lookup(ctx, "a-real-token-1"); !ok || app.ID != "wxA" || b.Stats().RedisLookups != 0 {
		t.Fatalf("the real announcement: %+v, %v after %d Redis lookups", app, ok, b.Stats().RedisLookups)
	}
}

// Issue 22.2: an announcement was trusted as sent: one message moved a
// real token to another app on every replica, the learner included, for
// 400 days. What Redis holds wins; the message only says "look".
func TestForgedAnnouncementIsNotTrusted(t *testing.T) {
	srv := redistest.Shared(t)
	prefix := limitertest.Group(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	learner := apps.MustNew(apps.Config{Redis: rdb, Key: testKey, Prefix: prefix})
	defer learner.Close()
	other := apps.MustNew(apps.Config{Redis: rdb, Key: testKey, Prefix: prefix})
	defer other.Close()
	const tok = "wx-real-token-0001"
	if err := learner.Learn(ctx, tok, apps.App{Provider: "wechat", ID: "wxA"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	forged := hashOf(tok) + " " + strconv.FormatInt((400*24*time.Hour).Milliseconds(), 10) + " wechat\x1fwxEVIL\x1f"
	if err := rdb.Publish(ctx, prefix+":apps", forged).Err(); err != nil {
		t.Fatal(err)
	}
	waitProcessed(t, learner, 2) // its own announcement, then the forged one
	waitProcessed(t, other, 2)
	for name, b := range map[string]*apps.Book{"learner": learner, "other": other} {
		if app, ok := b.Lookup(ctx, tok); !ok || app.ID != "wxA" {
			t.Errorf("%s: the token belongs to %+v, %v after the forged message; want wxA", name, app, ok)
		}
	}
}

// Issue 22.2: the lifetime of what a replica hears is what Redis says,
// capped at maxTTL, not what the message says: an entry written in Redis
// for 400 days is kept 30 days at most, then read again.
func TestHeardLifetimeIsCapped(t *testing.T) {
	srv := redistest.Shared(t)
	prefix := limitertest.Group(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	now := time.Now()
	b := apps.MustNew(apps.WithTestClock(apps.Config{Redis: rdb, Key: testKey, Prefix: prefix}, func() time.Time { return now }))
	defer b.Close()
	const tok = "wx-long-lived-token"
	h := hashOf(tok)
	if err := rdb.Set(ctx, prefix+":app:"+h, "wechat\x1fwxA\x1f", 400*24*time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Publish(ctx, prefix+":apps", h+" "+strconv.FormatInt((400*24*time.Hour).Milliseconds(), 10)+" wechat\x1fwxA\x1f").Err(); err != nil {
		t.Fatal(err)
	}
	waitProcessed(t, b, 1)
	if _, ok := b.Lookup(ctx, tok); !ok || b.Stats().RedisLookups != 0 {
		t.Fatalf("the heard token is not known locally (%+v)", b.Stats())
	}
	now = now.Add(apps.MaxTTL + time.Minute)
	if _, ok := b.Lookup(ctx, tok); !ok || b.Stats().RedisLookups != 1 {
		t.Fatalf("after maxTTL: %d Redis lookups, want 1 (the heard entry outlived maxTTL)", b.Stats().RedisLookups)
	}
}

// Issue 22.2: 50,000 messages with distinct app IDs added 239 MiB that was
// never freed. Unconfirmed messages hold nothing; identities are released
// with the last entry that holds them.
func TestHeardAppsAreReleased(t *testing.T) {
	srv := redistest.Shared(t)
	prefix := limitertest.Group(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	b := apps.MustNew(apps.Config{Redis: rdb, Key: testKey, Prefix: prefix})
	defer b.Close()
	const n = 5000
	pad := strings.Repeat("x", 1000)
	before := heap()
	pipe := rdb.Pipeline()
	for i := range n {
		pipe.Publish(ctx, prefix+":apps", hashOf("tok"+strconv.Itoa(i))+" 3600000 wechat\x1fwx"+strconv.Itoa(i)+pad+"\x1f")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	waitProcessed(t, b, n)
	if grown := int64(heap()) - int64(before); grown > 2<<20 {
		t.Errorf("%d forged announcements grew the heap by %d KiB, want under 2 MiB", n, grown>>10)
	}
	checkReleased(t, b)
}

func heap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
