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

	"github.com/quotaware/throttle/internal/faultproxy"
	"github.com/quotaware/throttle/internal/learnedhash"
	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/providers"
	"github.com/redis/go-redis/v9"
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
	lr := learner{name: "p", lowered: new(atomic.Int64), mu: new(sync.Mutex), seen: map[string]string{}, flooded: new(atomic.Bool),
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

// A hash flooded past maxLearnedRead fields is read in part each round
// (learnedhash.Read, TestReadIsBounded), with one warning, and what the
// replica applied from it before stays applied: fields a read in part did
// not return are not taken for deleted (and others applied in their place).
func TestLearnedHashFloodIsReadInPart(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	ctx := context.Background()
	logs := &strings.Builder{}
	var mu sync.Mutex
	var applied atomic.Int64
	lr := learner{name: "p", lowered: new(atomic.Int64), mu: new(sync.Mutex), seen: map[string]string{}, flooded: new(atomic.Bool),
		lower: func(providers.Learned) bool { applied.Add(1); return true }}
	loop := &headroomLoop{learners: []learner{lr}, rdb: rdb, prefix: "learned-flood", log: slog.New(slog.NewTextHandler(lockedWriter{&mu, logs}, nil))}
	key := learnedhash.Key(loop.prefix, "p")
	until := strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)
	pipe := rdb.Pipeline()
	for i := range maxLearnedFields {
		pipe.HSet(ctx, key, fmt.Sprintf("s GET /real/%d", i), "1:"+until)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	loop.readLearned()
	if n := len(lr.seen); n != maxLearnedFields {
		t.Fatalf("held %d fields, want %d", n, maxLearnedFields)
	}
	for i := range 5 * maxLearnedRead {
		pipe.HSet(ctx, key, fmt.Sprintf("s GET /flood/%d", i), "1:"+until)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		loop.readLearned()
	}
	for field := range lr.seen {
		if !strings.HasPrefix(field, "s GET /real/") {
			t.Fatalf("held %q: a field applied in place of one a read in part did not return", field)
		}
	}
	if n, a := len(lr.seen), applied.Load(); n != maxLearnedFields || a != maxLearnedFields {
		t.Fatalf("held %d fields, applied %d, want the first %d each", n, a, maxLearnedFields)
	}
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(logs.String(), "more fields than any fleet writes"); n != 1 {
		t.Fatalf("%d warnings of the flood, want 1:\n%s", n, logs.String())
	}
}

// lockedWriter serialises a log handler's writes into a builder.
type lockedWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
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

// A penalty heard as the Transport closes starts no read of the learned
// limits once the loop is closed, and Close waits for one started before.
// Redis is stalled, so a read started would still be under way when
// checked.
func TestNoLearnedReadAfterClose(t *testing.T) {
	srv := redistest.Start(t)
	proxy := faultproxy.Start(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	lr := learner{name: "p", lowered: new(atomic.Int64), mu: new(sync.Mutex), seen: map[string]string{}, flooded: new(atomic.Bool),
		lower: func(providers.Learned) bool { return true }}
	loop := &headroomLoop{learners: []learner{lr}, rdb: rdb, prefix: "learned-close", log: slog.New(slog.DiscardHandler),
		timer: time.AfterFunc(time.Hour, func() {})}

	proxy.Stall()
	loop.pokeLearned() // before Close: a read starts, held by the stall
	closed := make(chan struct{})
	go func() { loop.close(); close(closed) }()
	proxy.Resume()
	<-closed
	if loop.reading.Load() {
		t.Fatal("Close returned while a poked read was under way")
	}
	proxy.Stall()
	defer proxy.Resume()
	loop.pokeLearned()
	if loop.reading.Load() {
		t.Fatal("a poke after Close started a read")
	}
}
