package tokens

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/quotaware/throttle/internal/apipath"
)

// An exchange whose credential another replica is fetching waits for that
// answer, polling Redis every poll, for at most maxWait (WithMaxWait) from
// when it began to wait (or from the start its context carries,
// BudgetFrom), and fails then: a fetch that slow must not hold
// every caller of the credential past its budget. A lease no exchange of
// this package could have set (one without an end, or longer than any
// lease lives) is taken for what it is, a stale or planted key, and
// deleted rather than waited on.

// ErrWaitedTooLong matches a *WaitError.
var ErrWaitedTooLong = errors.New("tokens: another replica's exchange of the credential outlasted the wait")

// WaitError reports an exchange that waited maxWait for another replica's
// fetch of its credential, which had not answered. Nothing was sent.
type WaitError struct {
	Waited  time.Duration
	MaxWait time.Duration
}

// Error implements error.
func (e *WaitError) Error() string {
	return fmt.Sprintf("tokens: waited %v (at most %v) for another replica's exchange of the credential", e.Waited.Round(time.Millisecond), e.MaxWait)
}

// Is makes errors.Is(err, ErrWaitedTooLong) true.
func (e *WaitError) Is(target error) bool { return target == ErrWaitedTooLong }

// waitedKey marks the context of an exchange that Stored counted as
// Waited already (and gave the start of its wait, BudgetFrom).
type waitedKey struct{}

// budgetKey holds when the request's wait budget began (BudgetFrom).
type budgetKey struct{}

// BudgetFrom returns ctx with the start of its request's wait budget: a
// wait for another replica's fetch then ends maxWait after start rather
// than after its own beginning, so that a request that waited for
// something else first (the Transport's limiter) waits no longer in all.
func BudgetFrom(ctx context.Context, start time.Time) context.Context {
	return context.WithValue(ctx, budgetKey{}, start)
}

// waiter is one exchange's wait for another replica's fetch.
type waiter struct {
	timer *time.Timer
	since time.Time
}

// pollWait waits one poll for an exchange another replica is fetching, or
// until ctx ends, or fails with a *WaitError once the exchange has waited
// maxWait. The first wait counts the exchange as Waited (unless Stored
// did); the caller stops w when it is done.
func (s *Sharer) pollWait(ctx context.Context, w *waiter, provider string) error {
	if w.timer == nil {
		if ctx.Value(waitedKey{}) == nil {
			s.count(provider, Waited)
		}
		w.since = time.Now()
		if start, ok := ctx.Value(budgetKey{}).(time.Time); ok {
			w.since = start
		}
		w.timer = time.NewTimer(s.poll)
	} else {
		w.timer.Reset(s.poll)
	}
	if s.maxWait > 0 {
		if waited := time.Since(w.since); waited >= s.maxWait {
			return &WaitError{Waited: waited, MaxWait: s.maxWait}
		}
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-w.timer.C:
		return nil
	}
}

// stop stops the wait's timer, if one was made.
func (w *waiter) stop() {
	if w.timer != nil {
		w.timer.Stop()
	}
}

// leaseHeld reports whether the lease at lock is held by an exchange in
// flight, deleting it when no exchange could have set it (see leaseLua).
func (s *Sharer) leaseHeld(ctx context.Context, lock string) (bool, error) {
	n, err := s.rdb.Eval(ctx, leaseLua, []string{lock}, max(s.lease, maxLeaseHold).Milliseconds()).Int()
	return n == 1, err
}

// leaseLua: 1 when the lease at KEYS[1] is held, 0 when there is none, it
// is the mark of an answer that could not be kept (takeLua), or it
// was deleted for having no end or more time left than any lease is given
// (ARGV[1] ms): every lease is set, and renewed, with an end of at most
// that.
const leaseLua = `local t = redis.call('PTTL', KEYS[1])
if t == -2 then return 0 end
if t == -1 or t > tonumber(ARGV[1]) then redis.call('DEL', KEYS[1]) return 0 end
if redis.pcall('GET', KEYS[1]) == 'unkept' then return 0 end
return 1`

// An exchange that the limiter admitted may still send nothing: answered
// from Redis after all (another replica's fetch ended meanwhile), or given
// up while it waited for one. Its slot of the exchange's rules was booked
// for a call the provider never got, and, for WeChat's /cgi-bin/token,
// counted against its 2,000 a day; the Transport watches for this and gives
// the slot back.

// unsentKey holds the flag of a watched exchange.
type unsentKey struct{}

// WatchSent returns ctx with a flag that the exchange of a request made
// with it sets when it ends without sending anything, and the flag.
func WatchSent(ctx context.Context) (context.Context, *atomic.Bool) {
	f := new(atomic.Bool)
	return context.WithValue(ctx, unsentKey{}, f), f
}

// IsExchange reports whether req is a token exchange the Sharer may answer
// or hold: only those need watching.
func IsExchange(req *http.Request) bool { return exchangeFor(req.Method, apipath.Sent(req.URL)) != nil }

// unsent marks ctx's exchange as having sent nothing.
func unsent(ctx context.Context) {
	if f, ok := ctx.Value(unsentKey{}).(*atomic.Bool); ok {
		f.Store(true)
	}
}
