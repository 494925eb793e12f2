package throttle

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotaware/throttle/internal/learnedhash"
	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/providers"
)

// The learned hash is anyone's who can write to the Redis: a replica holds
// at most maxLearnedFields of its fields at once, takes none longer than
// maxLearnedField, and forgets the fields deleted from it. A flood of
// 100,000 fields had each replica keep every one, and the preset a route
// per API, for good (392 MiB for a two-app Feishu preset).
func TestLearnedHashFloodIsBounded(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	var applied atomic.Int64
	lr := learner{name: "p", lowered: new(atomic.Int64), mu: new(sync.Mutex), seen: map[string]string{},
		lower: func(providers.Learned) bool { applied.Add(1); return true }}
	loop := &headroomLoop{learners: []learner{lr}, rdb: rdb, prefix: "learned-test", log: slog.New(slog.DiscardHandler)}
	key := learnedhash.Key(loop.prefix, "p")
	until := strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)
	fields := map[string]any{"s GET " + strings.Repeat("x", learnedhash.MaxField): "1:" + until} // too long: dropped
	for i := range 2 * maxLearnedFields {
		fields[fmt.Sprintf("s GET /api/%d", i)] = "1:" + until
	}
	if err := rdb.HSet(ctx, key, fields).Err(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		loop.readLearned()
	}
	if n := len(lr.seen); n != maxLearnedFields || applied.Load() != maxLearnedFields {
		t.Fatalf("held %d fields, applied %d, want %d each", n, applied.Load(), maxLearnedFields)
	}
	if rdb.HExists(ctx, key, "s GET "+strings.Repeat("x", learnedhash.MaxField)).Val() {
		t.Error("the overlong field was kept in Redis")
	}
	rdb.Del(ctx, key)
	loop.readLearned()
	if n := len(lr.seen); n != 0 {
		t.Fatalf("after the hash was deleted: %d fields held, want 0", n)
	}
}

// A lapsed field is deleted only while it holds the value read: one that
// another replica wrote again since (a limit learned anew) stays. A plain
// HDEL after the read dropped the new limit from every replica's next read.
func TestLapsedLearnedFieldRewrittenStays(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	key := learnedhash.Key("learned-test", "p")
	rdb.HSet(ctx, key, "s GET /old", "1:1", "s GET /renewed", "5:99999999999999")
	dropLapsed(ctx, rdb, key, []string{"s GET /old", "1:1", "s GET /renewed", "1:1"})
	if rdb.HExists(ctx, key, "s GET /old").Val() {
		t.Error("a lapsed field unchanged since the read was kept")
	}
	if v := rdb.HGet(ctx, key, "s GET /renewed").Val(); v != "5:99999999999999" {
		t.Errorf("a field rewritten since the read: %q, want it kept", v)
	}
}
