package limiter

import (
	"context"
	"sync/atomic"
	"time"
)

// callBound bounds each script call by the Timeout without a timer per
// call where the caller's context cannot be cancelled (context.Background,
// as SDKs and coalesced calls use): calls that start within a sixteenth of
// the Timeout of one another share one deadline, so a call is cut between
// 15/16 of the Timeout and the Timeout after it starts. A
// context.WithTimeout per call cost the one-call path about a tenth of its
// decisions per second and 2.5-3 µs of the client's CPU a call: the
// runtime's timer heap and the wakes of its poller (docs/design.md,
// section 6).
type callBound struct {
	cur atomic.Pointer[sharedDeadline]
}

// sharedDeadline is one deadline and the context that ends at it. Its
// timer releases it when the deadline passes; it is never cancelled
// before, since calls still in flight hold it.
type sharedDeadline struct {
	ctx    context.Context
	cancel context.CancelFunc // only for one that lost the race to be shared
	end    time.Time
}

// within returns the context to make a call with, bounded by d (> 0):
//   - ctx itself when its own deadline comes first;
//   - ctx with a timer of its own when ctx can be cancelled: go-redis
//     watches a call's context while the call waits for a connection, and
//     a caller cancelled there must return at once rather than send a
//     call whose slot it then has to give back;
//   - else a context that ends at the shared deadline and carries ctx's
//     values (the caller's trace span reaches the client's hooks). The
//     CancelFunc is nil then, as when ctx goes as it is.
func (b *callBound) within(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	now := time.Now()
	own, hasOwn := ctx.Deadline()
	if hasOwn && own.Sub(now) <= d {
		return ctx, nil
	}
	if ctx.Done() != nil {
		return context.WithDeadline(ctx, now.Add(d))
	}
	for {
		s := b.cur.Load()
		if s != nil && s.end.Sub(now) >= d-d/16 {
			if hasOwn && own.Before(s.end) {
				// Renewed by a call that started later than this one
				// read the clock: the caller's deadline comes first.
				return ctx, nil
			}
			return boundCtx{Context: s.ctx, values: ctx}, nil
		}
		n := &sharedDeadline{end: now.Add(d)}
		n.ctx, n.cancel = context.WithDeadline(context.Background(), n.end)
		if b.cur.CompareAndSwap(s, n) {
			return boundCtx{Context: n.ctx, values: ctx}, nil
		}
		// Another call renewed it first: that one may still be too early
		// for this call, which is checked again.
		n.cancel()
	}
}

// boundCtx ends with a shared deadline (Deadline, Done, Err) and carries
// the caller's values.
type boundCtx struct {
	context.Context
	values context.Context
}

func (c boundCtx) Value(key any) any { return c.values.Value(key) }
