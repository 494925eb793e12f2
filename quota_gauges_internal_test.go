package throttle

import (
	"context"
	"fmt"
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

	// Full, then idle: every key is forgotten at the next read, and a new
	// one is tracked again.
	for i := 2000; i < maxKnownQuotas+10; i++ {
		q.see("dingtalk", month(i))
	}
	if n := q.n.Load(); n != maxKnownQuotas {
		t.Fatalf("%d keys tracked, want the bound %d", n, maxKnownQuotas)
	}
	// Two spells pass: a rule not named since the first began goes.
	for range 2 {
		q.spellAt = q.spellAt.Add(-quotaIdle)
		q.read(ctx)
	}
	q.see("dingtalk", hot) // named again in the second: kept
	q.spellAt = q.spellAt.Add(-quotaIdle)
	if got := q.read(ctx); len(got) != 1 || got[0].used != 90 || q.n.Load() != 1 {
		t.Fatalf("after an idle spell: gauges %+v, %d keys tracked; want org 1500's 90 alone", got, q.n.Load())
	}
	q.see("dingtalk", month(maxKnownQuotas+20))
	if n := q.n.Load(); n != 2 {
		t.Fatalf("%d keys tracked after a new one, want 2", n)
	}
}
