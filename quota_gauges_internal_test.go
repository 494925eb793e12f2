package throttle

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/rule"
)

// An ISV in thousands of orgs: the org nearest its month's limit is the one
// the gauge reports, though it was met after a thousand others (the gauges
// watched the first 1,024 met, for good); and keys no route names for
// quotaIdle are forgotten, making room for new ones.
func TestQuotaGaugesFollowEveryOrg(t *testing.T) {
	mem := limiter.NewMemory()
	q := &quotaWatch{reader: mem}
	ctx := context.Background()
	month := func(i int) rule.Rule {
		return rule.Must(rule.NewCalendar(fmt.Sprintf("month:org%05d", i), 100, rule.Month, time.UTC))
	}
	for i := range 2000 {
		q.see("dingtalk", month(i))
	}
	hot := month(1500)
	for range 90 {
		if _, err := mem.Reserve(ctx, limiter.Request{Group: "dingtalk", Rules: []rule.Rule{hot}}); err != nil {
			t.Fatal(err)
		}
	}
	got := q.read(ctx)
	if len(got) != 1 || got[0].used != 90 || got[0].limit != 100 || got[0].name != "month" {
		t.Fatalf("gauges %+v, want month: 90 of 100 (org 1500)", got)
	}

	// Full: keys idle for a spell are forgotten at a read, making room;
	// below the bound none is, however idle (an org calling once a night
	// keeps its series).
	for i := 2000; i < maxKnownQuotas+10; i++ {
		q.see("dingtalk", month(i))
	}
	if n := q.n.Load(); n != maxKnownQuotas {
		t.Fatalf("%d keys tracked, want the bound %d", n, maxKnownQuotas)
	}
	for range 2 { // two spells: the keys met before the first are idle
		q.spellAt = q.spellAt.Add(-quotaIdle)
		q.read(ctx)
	}
	if n := q.n.Load(); n != maxKnownQuotas-2000 {
		t.Fatalf("%d keys tracked, want the 2,000 idle ones forgotten: %d", n, maxKnownQuotas-2000)
	}
	q.see("dingtalk", hot) // named again: tracked again
	for range 2 {
		q.spellAt = q.spellAt.Add(-quotaIdle)
		if got := q.read(ctx); len(got) != 1 || got[0].used != 90 {
			t.Fatalf("gauges %+v, want org 1500's 90", got)
		}
	}
	if n := q.n.Load(); n != maxKnownQuotas-2000+1 {
		t.Fatalf("%d keys tracked below the bound, want every one kept however idle: %d", n, maxKnownQuotas-2000+1)
	}
}

// A rule changing under its key (a reconciled limit) while a read forgets
// the key keeps the count of keys tracked true (run with -race): the
// change was stored over the forgotten entry without being counted, and
// the count drifted below the map's size, weakening the bound.
func TestQuotaGaugesCountStaysTrue(t *testing.T) {
	q := &quotaWatch{reader: limiter.NewMemory()}
	ctx := context.Background()
	const keys = 64
	rules := func(limit int) []rule.Rule {
		rs := make([]rule.Rule, keys)
		for i := range rs {
			rs[i] = rule.Must(rule.NewCalendar(fmt.Sprintf("month:org%d", i), limit, rule.Month, time.UTC))
		}
		return rs
	}
	a, b := rules(100), rules(99)
	for _, r := range a {
		q.see("g", r)
	}
	offset := int32(maxKnownQuotas - keys)
	q.n.Add(offset) // as full: every read forgets what is idle
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; ; j++ {
				select {
				case <-stop:
					return
				default:
				}
				rs := a
				if (j+w)%2 == 1 {
					rs = b
				}
				for _, r := range rs {
					q.see("g", r)
				}
			}
		}()
	}
	for range 2000 {
		q.mu.Lock()
		q.spellAt, q.spellGen = time.Time{}, 1<<60 // each read forgets every key it finds
		q.mu.Unlock()
		q.read(ctx)
	}
	close(stop)
	wg.Wait()
	size := int32(0)
	q.known.Range(func(any, any) bool { size++; return true })
	if n := q.n.Load() - offset; n != size {
		t.Fatalf("%d keys counted, %d held", n, size)
	}
}
