package limiter

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A penalty's end in a reserve reply is on Redis's clock; a replica whose
// clock is seconds off reads it on its own: 5 s behind Redis, an 800 ms
// penalty held its breakers for 5.8 s, and 5 s ahead, not at all. Within
// the bound an end stays exactly as stored.
func TestPenaltyEndOnThisReplicasClock(t *testing.T) {
	l := &redisLimiter{epochs: map[string]epochState{}}
	answered := time.Now().Truncate(time.Microsecond)
	for _, skew := range []time.Duration{5 * time.Second, -5 * time.Second, 100 * time.Millisecond} {
		redisNow := answered.Add(skew)
		p := &Penalty{Scope: "app", Until: redisNow.Add(800 * time.Millisecond)}
		out := []Reservation{{penalty: p, retryAfter: 800 * time.Millisecond}, {penalty: p, retryAfter: 800 * time.Millisecond}}
		reqs := []Request{{Group: "g"}, {Group: "g"}}
		l.settle(reqs, out, replyFlags{now: redisNow.UnixMicro()}, epochState{}, answered)
		want := answered.Add(800 * time.Millisecond)
		if skew < maxClockSkew && skew > -maxClockSkew {
			want = redisNow.Add(800 * time.Millisecond)
		}
		if got := out[0].penalty.Until; !got.Equal(want) {
			t.Errorf("Redis %v ahead: penalty until %v, want %v (800 ms from the answer on this clock)", skew, got, want)
		}
	}
}

// The watcher moves the ends it reads the same way, by Redis's TIME asked
// in the same round trip.
func TestClockSkew(t *testing.T) {
	sent := time.Now()
	got := sent.Add(2 * time.Millisecond)
	mid := sent.Add(time.Millisecond)
	for _, tc := range []struct {
		redis time.Time
		err   error
		want  time.Duration
	}{
		{mid.Add(5 * time.Second), nil, 5 * time.Second},
		{mid.Add(-5 * time.Second), nil, -5 * time.Second},
		{mid.Add(100 * time.Millisecond), nil, 0},
		{mid.Add(time.Hour), errors.New("down"), 0},
	} {
		if d := clockSkew(redis.NewTimeCmdResult(tc.redis, tc.err), sent, got); d != tc.want {
			t.Errorf("Redis at %v of the midpoint (err %v): skew %v, want %v", tc.redis.Sub(mid), tc.err, d, tc.want)
		}
	}
}
