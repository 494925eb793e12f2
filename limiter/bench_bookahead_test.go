package limiter_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/rule"
)

// hotCapped is hot with a cap on booking ahead (rule.WithMaxBookAhead):
// never binding, so every call runs the cap's check and the whole write.
func hotCapped(key string) rule.Rule {
	return rule.Must(rule.New(key, 1_000_000_000, time.Second,
		rule.WithBurst(1_000_000), rule.WithMaxBookAhead(50*time.Millisecond)))
}

// What a Feishu IM send carries: the API's per-second and per-minute rules
// and the recipient's capped rule, with the API, app and chat scopes. The
// cost of the cap is the difference to the same request with the chat rule
// uncapped.
func BenchmarkRedisReserveChatCapped(b *testing.B) {
	benchRedisReserve(b, []rule.Rule{hot("s"), hot("m"), hotCapped("chat")}, []string{"api:x", "app:x", "entity:chat"})
}

func BenchmarkRedisReserveChatUncapped(b *testing.B) {
	benchRedisReserve(b, []rule.Rule{hot("s"), hot("m"), hot("chat")}, []string{"api:x", "app:x", "entity:chat"})
}

// Against BenchmarkMemoryReserveWindow: a window rule, since Memory
// outruns any paced rule (its interval is at least 1µs) and a capped one
// would then refuse.
func BenchmarkMemoryReserveWindowCapped(b *testing.B) {
	m := limiter.NewMemory()
	ctx := context.Background()
	hot := rule.Must(rule.NewWindow("hot", 1_000_000_000, time.Second, rule.WithMaxBookAhead(50*time.Millisecond)))
	req := limiter.Request{Group: "g", Rules: []rule.Rule{hot}, MaxWait: time.Minute}
	// A goroutine that read the clock and was then descheduled for longer
	// than the cap, while others booked, is refused (it would otherwise
	// book that far ahead): counted, not a failure.
	var refused atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			res, err := m.Reserve(ctx, req)
			if err != nil {
				b.Errorf("reserve: %v", err)
				return
			}
			if !res.OK() {
				refused.Add(1)
			}
		}
	})
	b.ReportMetric(float64(refused.Load())/float64(b.N), "refused/op")
}
