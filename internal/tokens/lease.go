package tokens

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaware/throttle/internal/apipath"
	"github.com/quotaware/throttle/internal/exchanges"
)

// The lease of an exchange: the first replica to ask takes it (SET NX PX in
// takeLua, in exchange), fetches, and lets it go; the others wait for its answer.

// maxLeaseHold bounds how long a replica holds a lease for one fetch: past
// it, an exchange that has not answered is presumed lost, and another
// replica may fetch.
const maxLeaseHold = time.Minute

// holdLease renews this replica's lease at lock every third of a lease
// while its fetch lasts, up to maxLeaseHold, so that one renewal that
// fails (each is bounded, peekTimeout) leaves another before the lease
// ends; the function it returns stops renewing and lets the lease go.
func (s *Sharer) holdLease(ctx context.Context, lock, id string) (release func()) {
	ctx = context.WithoutCancel(ctx)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(s.lease / 3)
		defer tick.Stop()
		limit := time.NewTimer(maxLeaseHold)
		defer limit.Stop()
		for {
			select {
			case <-stop:
				return
			case <-limit.C:
				return
			case <-tick.C:
				// Bounded as every Redis call of an exchange is.
				rctx, cancel := context.WithTimeout(ctx, peekTimeout)
				s.rdb.Eval(rctx, renewLua, []string{lock}, id, s.lease.Milliseconds())
				cancel()
			}
		}
	}()
	return func() {
		close(stop)
		<-done
		s.release(ctx, lock, id)
	}
}

// release lets this exchange's lease at lock go by compare-and-delete
// (releaseLua), whatever ctx says and under a bound of its own
// (peekTimeout): a lease left held stalls every replica's exchange of the
// credential for its length.
func (s *Sharer) release(ctx context.Context, lock, id string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), peekTimeout)
	defer cancel()
	s.rdb.Eval(rctx, releaseLua, []string{lock}, id)
}

// leaseOwner is what the read-back of a take that failed found (ownAfterAll).
type leaseOwner int

const (
	// leaseUnknown: the read failed too, or no lease is held (the take
	// never ran, or the lease ended), or it is the mark of an answer not
	// kept, or it was this exchange's and its caller has gone: the exchange
	// is sent alone, as when Redis fails. A lease that may be the
	// exchange's was let go first.
	leaseUnknown leaseOwner = iota
	// leaseMine: the take set the lease though its reply was lost, and
	// the caller waits still: the exchange fetches as its holder.
	leaseMine
	// leaseOthers: another exchange holds the lease (this one's take
	// found it held): the exchange waits for its answer, as one whose
	// take was answered "held" does.
	leaseOthers
)

// ownAfterAll settles a take of key's lease as id that failed: its reply
// lost or later than its bound, Redis may have set the lease all the same.
// It reads the lease back, under a bound of its own (the take may have
// failed on the caller's deadline), and reports whose it is.
//
// Mine: the exchange goes on as its holder. Another's: the exchange waits
// for that fetch as any exchange that finds the lease held; sent alone, a
// WeChat /cgi-bin/token exchange would rotate the token while the other
// replica's fetch is in flight, and one of the two tokens the fleet is
// handed dies. Unknown: the exchange is sent alone, and a lease that may
// be id's is let go first (release): left set, it held every other
// replica's exchange of the credential for its length (3 s by default),
// after which they fetched again, rotating away the token this one had
// just handed out. A lease of id's whose caller has given up is let go
// too: nothing is fetched for it. A lease that reads "unkept" (the mark
// takeLua answers 2 for) is no fetch to wait for: the take would have
// answered unkept, and the exchange is sent alone as it would have been.
func (s *Sharer) ownAfterAll(ctx context.Context, key, id string) leaseOwner {
	lock := key + ":lock"
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), peekTimeout)
	cur, err := s.rdb.Get(rctx, lock).Result()
	cancel()
	switch {
	case err == nil && cur == id:
		if ctx.Err() == nil {
			return leaseMine
		}
	case err == nil && cur != "unkept":
		return leaseOthers
	case err == nil, errors.Is(err, redis.Nil):
		return leaseUnknown // none, or the mark: nothing of id's to let go
	}
	s.release(ctx, lock, id)
	return leaseUnknown
}

// take takes the lease of key (key+":lock") as id for the fetch of its
// credential, reporting whether it did; bounded as peek is, so that a Redis that does not answer
// delays the exchange, sent alone then, by no more.
//
// Unless force, it takes nothing and reports unkept while the last fetch's
// answer could not be kept (takeLua).
func (s *Sharer) take(ctx context.Context, key, id string, force bool) (got, unkept bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, peekTimeout)
	defer cancel()
	honour := "1"
	if force {
		honour = "0" // a forced refresh rotates the token: one at a time
	}
	n, err := s.rdb.Eval(ctx, takeLua, []string{key + ":lock"}, id, s.lease.Milliseconds(), honour).Int()
	return n == 1, n == 2, err
}

// markUnkept turns the lease lock of key into the mark that the answer
// just fetched could not be kept, so that the exchanges waiting for it go
// on their own (unkeptFor). A rotating exchange (WeChat's GET
// /cgi-bin/token) is never marked: sent together, its exchanges would
// invalidate one another's tokens and spend the account's 2,000 a day.
func (s *Sharer) markUnkept(ctx context.Context, sent *http.Request, key, lock string) {
	if lock == "" || exchanges.Rotates(sent.Method, apipath.Sent(sent.URL)) {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, peekTimeout)
	defer cancel()
	s.rdb.Eval(ctx, unkeptLua, []string{key + ":lock"}, lock, unkeptFor.Milliseconds())
}

// stillHeld reports whether the lease at lock is still this fetch's, read
// right before its answer is kept. The read and the write are two calls
// (the lease and the answer are two keys, on two slots of a cluster), but
// a replica that took the lease over after it lapsed writes only after its
// own exchange, which takes a provider's round trip: its answer, the newer,
// lands last.
func (s *Sharer) stillHeld(ctx context.Context, lock, id string) bool {
	ctx, cancel := context.WithTimeout(ctx, peekTimeout)
	defer cancel()
	cur, err := s.rdb.Get(ctx, lock).Result()
	return err == nil && cur == id
}

// renewLua extends the lease by ARGV[2] ms only while it is still this
// replica's.
const renewLua = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0`

// takeLua sets the lease to ARGV[1] for ARGV[2] ms unless it is held, and
// answers 1 when it is ARGV[1]'s after the call. go-redis sends a command
// again when its connection failed before the reply (MaxRetries, 3 by
// default): a SET NX sent so answered that the lease was held, by this very
// exchange, which then waited the lease out (3 s) with no fetch in flight.
//
// A lease that reads "unkept" is the mark a fetch whose answer could not
// be kept leaves (unkeptFor): with ARGV[3] '1' it answers 2, taking
// nothing; a forced refresh (ARGV[3] '0') takes it over. The mark is the
// lease's own key, so the script names one key, as a cluster needs (the
// token's keys carry no hash tag).
const takeLua = `local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then return 1 end
if v == 'unkept' and ARGV[3] == '1' then return 2 end
if v and v ~= 'unkept' then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1`

// unkeptLua turns this fetch's lease (ARGV[1]) into the mark "unkept" for
// ARGV[2] ms; a lease no longer its own is left alone.
const unkeptLua = `if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], 'unkept', 'PX', ARGV[2])
  return 1
end
return 0`

// unkeptFor is how long a fetch whose answer could not be kept (an error
// code, a wrong secret, a repeat too near its end) lets the exchanges of
// its credential go to the provider each on its own rather than one lease
// after another: those waiting would otherwise fetch one at a time, a
// round trip each, and the last of a crowd was told its wait ran out
// ("another replica's exchange in flight") instead of the provider's
// answer. A second: the next exchange after it that can be kept is kept.
const unkeptFor = time.Second

// releaseLua deletes the lease only while it is still this replica's.
const releaseLua = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`

// nonce names one lease, so that only its holder renews or releases it.
func nonce() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
