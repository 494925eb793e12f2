package limiter_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle/internal/faultproxy"
	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/limitertest"
)

// A subscription whose connection takes the ping and delivers nothing (a
// peer gone without a reset, a proxy or NAT holding the connection open)
// is replaced once the ping goes unanswered. It was pinged every quiet
// spell for good, and the replica heard no penalty or lift until the
// kernel gave the connection up, about 15 minutes later, or never.
func TestSilentSubscriptionIsReplaced(t *testing.T) {
	srv := redistest.Shared(t)
	proxy := faultproxy.Start(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	t.Cleanup(func() { rdb.Close() })
	prefix := limitertest.Group(t)
	l, err := limiter.NewRedis(rdb, limiter.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	heard := make(chan limiter.Penalty, 64)
	stop := l.WatchPenaltiesPinging(100*time.Millisecond, func(_ string, p limiter.Penalty) { heard <- p })
	t.Cleanup(stop)

	c := srv.Client(t)
	ctx := context.Background()
	until := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	value := strconv.FormatInt(until.UnixMicro(), 10) + "|88"
	if err := c.Set(ctx, l.PenaltyKey("g", "app"), value, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	announce := "v1 penalty\ng\napp\n" + strconv.FormatInt(until.UnixMicro(), 10) + "\n88"
	// announceUntilHeard publishes beside the proxy until the watcher
	// passes the penalty on, or fails after d.
	announceUntilHeard := func(d time.Duration) bool {
		deadline := time.After(d)
		for {
			if err := c.Publish(ctx, l.Channel(), announce).Err(); err != nil {
				t.Fatal(err)
			}
			select {
			case <-heard:
				return true
			case <-deadline:
				return false
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	if !announceUntilHeard(10 * time.Second) {
		t.Fatal("the subscription never heard an announcement")
	}
	// From the next ping on, the subscription's connection delivers
	// nothing more, though it stays open.
	proxy.HoldRepliesAfter([]byte("ping"))
	t.Cleanup(proxy.Resume)
	for deadline := time.Now().Add(10 * time.Second); proxy.Holding() == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the quiet subscription sent no ping in 10s")
		}
		time.Sleep(10 * time.Millisecond) // polls the proxy's state
	}
	if !announceUntilHeard(10 * time.Second) {
		t.Fatal("a subscription that stopped delivering was never replaced: announcements unheard for 10s")
	}
}
