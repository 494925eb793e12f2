package limiter_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/rule"
)

// A listener added while Redis is away is told so at once: a Shared that
// went down before a Transport was given it showed no fallback (its gauge
// 0, its token exchanges trying Redis first) for the whole outage.
func TestListenerAddedDuringAnOutageIsTold(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer c.Close()
	s, err := limiter.NewShared(c, limiter.SharedConfig{Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	req := limiter.Request{Group: "g", Rules: []rule.Rule{rule.Must(rule.New("k", 10, time.Second))}}
	if _, err := s.Reserve(context.Background(), req); err != nil {
		t.Fatalf("reserve during the outage (local share): %v", err)
	}
	var told []bool
	var cause error
	stop := s.Listen(limiter.Listener{Switch: func(down bool, err error) { told, cause = append(told, down), err }})
	defer stop()
	if len(told) != 1 || !told[0] || cause == nil {
		t.Fatalf("a listener added during the outage was told %v (%v), want down once with the cause", told, cause)
	}
}
