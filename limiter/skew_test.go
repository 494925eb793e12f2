package limiter_test

import (
	"bytes"
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter"
)

// 22.9: a replica whose clock is off Redis's by ±2s shares a "next second"
// penalty with the end it meant, on Redis's clock: one behind no longer has
// it dropped, one ahead no longer lengthens it by its skew.
func TestSharedPenaltyUnderClockSkew(t *testing.T) {
	srv := redistest.Shared(t)
	c := srv.Client(t)
	ctx := context.Background()
	for _, skew := range []time.Duration{-2 * time.Second, 2 * time.Second} {
		t.Run(skew.String(), func(t *testing.T) {
			s := newShared(t, c, limiter.SharedConfig{Prefix: "skew" + strconv.Itoa(int(skew.Seconds())), Share: 1, Timeout: 5 * time.Second})
			s.SetClock(func() time.Time { return time.Now().Add(skew) })
			// The replica's "next second" is at most a second ahead of its own now.
			p := limiter.Penalty{Scope: "app", Until: time.Now().Add(skew + 800*time.Millisecond), Code: "90018"}
			before := redisNow(t, c)
			if err := s.Penalize(ctx, "g", p); err != nil {
				t.Fatal(err)
			}
			after := redisNow(t, c)
			v, err := c.Get(ctx, s.Redis().PenaltyKey("g", "app")).Result()
			if err != nil {
				t.Fatalf("the penalty is not in Redis: %v", err)
			}
			end, _, _ := strings.Cut(v, "|")
			us, _ := strconv.ParseInt(end, 10, 64)
			// Its end on Redis's clock: 800ms after Penalize, within the
			// call's own time (and some slack for a loaded machine).
			lo, hi := before.Add(700*time.Millisecond), after.Add(900*time.Millisecond)
			if got := time.UnixMicro(us); got.Before(lo) || got.After(hi) {
				t.Fatalf("stored end %v, want within [%v, %v] on Redis's clock", got, lo, hi)
			}
		})
	}
}

// An end the provider stated on its own clock (DingTalk's "处罚将在 …
// 结束") is shared as stated by a replica whose clock is off by minutes:
// moved by the skew, a 5-minute ban was kept 3 minutes by a replica 2
// minutes ahead, and 7 by one 2 minutes behind.
func TestStatedPenaltyKeptUnderClockSkew(t *testing.T) {
	srv := redistest.Shared(t)
	c := srv.Client(t)
	ctx := context.Background()
	for _, skew := range []time.Duration{-2 * time.Minute, 2 * time.Minute} {
		s := newShared(t, c, limiter.SharedConfig{Prefix: "stated" + strconv.Itoa(int(skew.Minutes())), Share: 1, Timeout: 5 * time.Second})
		s.SetClock(func() time.Time { return time.Now().Add(skew) })
		// A minute ahead is past on the clock of the replica ahead: it
		// used to drop the penalty before asking Redis.
		for _, ahead := range []time.Duration{5 * time.Minute, time.Minute} {
			scope := "ip" + ahead.String()
			end := redisNow(t, c).Add(ahead).Truncate(time.Second)
			if err := s.Penalize(ctx, "g", limiter.Penalty{Scope: scope, Until: end, Code: "90018", Stated: true}); err != nil {
				t.Fatal(err)
			}
			v, err := c.Get(ctx, s.Redis().PenaltyKey("g", scope)).Result()
			if err != nil {
				t.Fatalf("skew %v, end %v ahead: the penalty is not in Redis: %v", skew, ahead, err)
			}
			stored, _, _ := strings.Cut(v, "|")
			if us, _ := strconv.ParseInt(stored, 10, 64); !time.UnixMicro(us).Equal(end) {
				t.Errorf("skew %v: stored end %v, want the stated %v", skew, time.UnixMicro(us), end)
			}
		}
	}
}

// A penalty over already (on the replica's clock) is not written, and the
// drop is logged.
func TestSharedLogsDroppedPenalty(t *testing.T) {
	srv := redistest.Shared(t)
	c := srv.Client(t)
	var buf syncBuffer
	var kinds []string
	var mu sync.Mutex
	s := newShared(t, c, limiter.SharedConfig{Prefix: "skewdrop", Share: 1, Logger: slog.New(slog.NewTextHandler(&buf, nil))},
		limiter.Listener{Event: func(kind, _ string) { mu.Lock(); kinds = append(kinds, kind); mu.Unlock() }})
	if err := s.Penalize(context.Background(), "g", limiter.Penalty{Scope: "app", Until: time.Now().Add(-time.Millisecond), Code: "1"}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(kinds) != 1 || kinds[0] != "penalty_dropped" || !strings.Contains(buf.String(), "was not shared") {
		t.Fatalf("events %v, log %q; want one penalty_dropped, logged", kinds, buf.String())
	}
}

func redisNow(t *testing.T, c *redis.Client) time.Time {
	t.Helper()
	now, err := c.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now
}

// syncBuffer is a bytes.Buffer a logger and a test may share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
