package tokens

import (
	"context"
	"time"
)

// Replacing a refused token. An SDK keeps the token it was handed until its
// own cache lapses, whatever the provider answers: none of them drops a
// token on WeChat's 40001. A replica whose SDK holds the token another
// replica's exchange invalidated (WeChat's /cgi-bin/token rotates: an SDK
// exchanging in a kept answer's last Margin, a new process, fetches a new
// token, and the old one works 5 more minutes) would fail every call until
// that cache lapses, up to the rest of the token's two hours. Once the
// provider has refused a token this replica handed out, the requests that
// still carry it are sent with the token the fleet now keeps for the same
// credential, when it keeps another: the same app's, which the SDK would
// have been handed had it exchanged again. The refused call itself has
// reached the SDK as the provider answered it.

// deadToken is a token of handed the provider refused: the answers that
// handed it out, where its replacement is looked for, and the replacement
// found.
type deadToken struct {
	hs    []handed
	until time.Time // when no SDK can hold it any more: its lifetime's end
	host  string    // the host that refused it, the only one a replacement goes to

	repl      string    // the token kept in its place, "" for none found
	replUntil time.Time // when the kept answer of repl ends
	nextLook  time.Time // no Redis read for a replacement before this
}

// lookEvery bounds the Redis reads for the replacement of one refused
// token while none is kept: a read a second, whatever the SDK sends.
const lookEvery = time.Second

// bury records tok, which the provider refused at host, with the answers
// that handed it out. Called with s.mu held.
func (s *Sharer) bury(tok string, hs []handed, host string) {
	if len(hs) == 0 {
		return
	}
	if _, known := s.dead[tok]; !known && len(s.dead) >= maxHanded {
		now := s.now()
		for t, d := range s.dead {
			if now.After(d.until) {
				delete(s.dead, t)
			}
		}
		if len(s.dead) >= maxHanded {
			return
		}
	}
	// A kept answer ends Margin before its token: an SDK told the
	// lifetime may hold the token that much longer.
	s.dead[tok] = &deadToken{hs: hs, until: lastUntil(hs).Add(s.margin), host: host}
}

// replacement returns the token to send to host in place of tok, which
// the provider refused: the token kept now for a credential that handed
// tok out, when it is another that the provider has not refused; "" when
// none is, or host is not the one that refused tok (only the provider's
// host that answered for tok is sent the live token, whatever host an SDK
// sends the dead one to). What it found is remembered until its kept
// answer ends, so that a request costs a Redis read only while no
// replacement is known, at most one a second (lookEvery) for each refused
// token.
func (s *Sharer) replacement(ctx context.Context, tok string, d *deadToken, host string) string {
	if host != d.host {
		return ""
	}
	now := s.now()
	s.mu.Lock()
	if now.After(d.until) {
		if s.dead[tok] == d {
			delete(s.dead, tok)
			s.nHand.Store(int32(len(s.handed) + len(s.dead)))
		}
		s.mu.Unlock()
		return ""
	}
	if d.repl != "" && now.Before(d.replUntil) && s.dead[d.repl] == nil {
		repl := d.repl
		s.mu.Unlock()
		return repl
	}
	if now.Before(d.nextLook) {
		s.mu.Unlock()
		return ""
	}
	d.nextLook = now.Add(lookEvery)
	s.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, peekTimeout)
	defer cancel()
	for _, h := range d.hs {
		if h.k == nil {
			continue
		}
		kv, err := s.get(ctx, h.key)
		if err != nil {
			continue
		}
		fetched, raw, err := h.k.open(h.key, kv.v)
		if err != nil {
			continue
		}
		repl, life, ok := check(h.ex, h.path, raw)
		if !ok || repl == tok {
			continue
		}
		until := fetched.Add(time.Duration(life)*time.Second - s.margin)
		if kv.ttl >= 0 {
			until = minTime(until, now.Add(kv.ttl))
		}
		s.mu.Lock()
		refused := s.dead[repl] != nil
		if !refused {
			d.repl, d.replUntil = repl, until
		}
		s.mu.Unlock()
		if refused {
			continue
		}
		// Sent in the SDK's requests from now on, the replacement is
		// watched as one handed out: refused in turn, it heals.
		s.remember(repl, handed{provider: h.provider, key: h.key, tag: h.k.tagOf(repl), until: until, ex: h.ex, path: h.path, k: h.k})
		return repl
	}
	return ""
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
