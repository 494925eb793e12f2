package limitertest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quotaware/throttle/limiter"
	"github.com/quotaware/throttle/limiter/rule"
)

// testContextDone: a request whose context is already cancelled or past its
// deadline gets the context's error and nothing else. It is not a failure of
// the limiter's store (ErrUnavailable), and it books nothing.
func testContextDone(t *testing.T, newLimiters Factory) {
	l := newLimiters(t, 1)[0]
	g := Group(t)
	req := limiter.Request{Group: g, Rules: []rule.Rule{pacedRule(t, "ctx", 1, time.Hour, 1)}, Scopes: []string{"app"}, MaxWait: time.Second}

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	cases := []struct {
		name string
		ctx  context.Context
		want error
	}{
		{"cancelled", cancelled, context.Canceled},
		{"past deadline", expired, context.DeadlineExceeded},
	}
	for _, tc := range cases {
		res, err := l.Reserve(tc.ctx, req)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: Reserve err %v, want %v", tc.name, err, tc.want)
		}
		if errors.Is(err, limiter.ErrUnavailable) {
			t.Errorf("%s: Reserve err %v also matches ErrUnavailable", tc.name, err)
		}
		if res.OK() {
			t.Errorf("%s: Reserve admitted %+v with a done context", tc.name, res)
		}
	}
	// Nothing was booked: the one slot of the hour is still free.
	if res := reserve(t, l, limiter.Request{Group: g, Rules: req.Rules}); !res.OK() || res.Delay() != 0 {
		t.Fatalf("after the refused requests: %+v, want the hour's one slot at once", res)
	}
}
