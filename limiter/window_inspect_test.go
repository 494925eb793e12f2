package limiter_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/quotaware/throttle/internal/redistest"
	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/limitertest"
	"github.com/quotaware/throttle/limiter/rule"
)

// Inspect tells a window rule's log from a paced rule's state.
func TestInspectWindowRule(t *testing.T) {
	l, err := limiter.NewRedis(redistest.Shared(t).Client(t), limiter.WithPrefix(limitertest.Group(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	g := limitertest.Group(t)
	r := rule.Must(rule.NewWindow("robot", 3, time.Minute))
	req := limiter.Request{Group: g, Rules: []rule.Rule{r}, MaxWait: 2 * time.Minute}
	for range 4 {
		if res, err := l.Reserve(ctx, req); err != nil || !res.OK() {
			t.Fatalf("reserve: %+v %v", res, err)
		}
	}
	st, err := l.Inspect(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Groups) != 1 || len(st.Groups[0].Rules) != 1 {
		t.Fatalf("state %+v, want one group with one rule", st)
	}
	rs := st.Groups[0].Rules[0]
	if rs.Kind != "window" || rs.Used != 4 || rs.Ahead < 59*time.Second {
		t.Errorf("rule state %+v, want a window log of 4 sends, the last booked about a minute ahead", rs)
	}
	if w := rs.Words(time.Now()); !strings.Contains(w, "4 sends") {
		t.Errorf("words %q", w)
	}
}
