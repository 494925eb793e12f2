package tokens

import (
	"bytes"
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// Converging on a rotating exchange's token. WeChat's GET /cgi-bin/token
// issues a new token on every call and retires the one before, which works
// about 5 minutes more. An answer fetched and not kept (sent alone while
// Redis did not answer, or fetched under the lease and its keep failed)
// has retired the token the fleet keeps: left at that, every replica's SDK
// is handed a token that dies within minutes, the refusals heal (delete)
// it, and nothing is kept that could replace the refused token in the
// requests SDKs go on sending with it, until some SDK exchanges again. So
// that answer is written for the fleet once Redis answers, in place of the
// one kept unless that one is newer.

// convergeFor bounds how long converge tries to write one answer: well
// within WeChat's 5 minutes of grace, so that the fleet is handed the live
// token before the one it kept dies, and short, since a write that comes
// late is more likely to find a newer answer that was kept and healed in
// the meantime (the key then empty), and to put back a dead token. The
// tries are spaced from peekTimeout, doubling up to convergeBackoff.
const (
	convergeFor     = time.Minute
	convergeBackoff = 8 * time.Second
)

// converge writes v, the sealed answer of a rotating exchange whose token
// is tok, fetched at fetched and kept until until, at key for the fleet, in
// the background: its caller has its answer already. It tries at once and
// then, while Redis does not answer, again with a growing pause for up to
// convergeFor; each try is bounded as an exchange's Redis calls are.
//
// Close ends it at once, in a try or a pause (the write is then not made:
// the fleet's next exchange fetches anew, as with no Redis). After Close
// nothing is started: the answer stays this replica's (remembered, healed
// and replaced as any).
func (s *Sharer) converge(k *keys, key, tok string, fetched time.Time, v []byte, until time.Time) {
	if !s.startBackground() {
		return
	}
	go func() {
		defer s.bg.Done()
		end := time.Now().Add(convergeFor)
		pause := peekTimeout
		for {
			done, err := s.writeIfNewer(k, key, tok, fetched, v, until)
			if done || errors.Is(err, redis.ErrClosed) || time.Now().Add(pause).After(end) {
				return
			}
			t := time.NewTimer(pause)
			select {
			case <-t.C:
			case <-s.closing.Done():
				t.Stop()
				return
			}
			pause = min(2*pause, convergeBackoff)
		}
	}()
}

// writeIfNewer makes v the answer kept at key unless the one kept is at
// least as new, or tok is known refused, or too little is left of it;
// done is false when Redis failed (or the kept answer changed between the
// read and the write), for converge to try again.
//
// Newer is fetched later, by the fetch times sealed in the two values
// (each read on its fetcher's clock when the answer arrived): the token a
// rotating exchange issued last is the one that lives, and of two answers
// the one that arrived later was issued later, unless the fetchers' clocks
// differ by more than the time between the two fetches (a fleet's clocks
// are kept within milliseconds; a fetch happens when nothing is kept, and
// one alone when Redis stalls, so two fetches are rarely that close). Such
// a skew keeps the older answer: refused once its grace is over, it heals,
// and the next exchange fetches anew. The keys' expiries would not tell:
// each depends on its writer's margin (a replica of a release with another
// one) and on when the write landed, which for this one is late, and the
// lifetimes WeChat states are all 7,200 s. A value that does not open
// (another credential's, garbled) is no answer, and is replaced, as a
// fetch's keep replaces it.
func (s *Sharer) writeIfNewer(k *keys, key, tok string, fetched time.Time, v []byte, until time.Time) (done bool, err error) {
	s.mu.Lock()
	refused := s.dead[tok] != nil
	s.mu.Unlock()
	left := until.Sub(s.now())
	if refused || left < time.Second {
		return true, nil
	}
	// A read and a write; cancelled by Close, which is not to wait for a
	// stalled Redis.
	ctx, cancel := context.WithTimeout(s.closing, 2*peekTimeout)
	defer cancel()
	cur, err := s.rdb.Get(ctx, key).Bytes()
	switch {
	case errors.Is(err, redis.Nil):
		cur = nil
	case err != nil:
		return false, err
	case len(cur) >= tagLen && bytes.Equal(cur[:tagLen], v[:tagLen]):
		return true, nil // this token is kept (a keep that landed after its bound)
	default:
		if kept, _, err := k.open(key, cur); err == nil && !kept.Before(fetched) {
			return true, nil
		}
	}
	n, err := s.rdb.Eval(ctx, replaceLua, []string{key}, cur, v, left.Milliseconds()).Int()
	return err == nil && n == 1, err
}

// replaceLua sets KEYS[1] to ARGV[2] for ARGV[3] ms only while it holds
// ARGV[1] (empty: nothing), the value writeIfNewer read and found older:
// an answer kept since its read stays.
const replaceLua = `local v = redis.call('GET', KEYS[1])
if (v or '') ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1`
