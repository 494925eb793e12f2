package tokens

import (
	"cmp"
	"context"
	"net/http"
	"slices"
	"time"

	"github.com/quotaware/throttle/internal/tokenform"
)

// Replacing a refused token. An SDK keeps the token it was handed until its
// own cache lapses, whatever the provider answers: none of them drops a
// token on WeChat's 40001. A replica whose SDK holds the token another
// replica's exchange invalidated (WeChat's /cgi-bin/token rotates: an SDK
// exchanging in a kept answer's last Margin, a new process, fetches a new
// token, and the old one works 5 more minutes) would fail every call until
// that cache lapses, up to the rest of the token's two hours. Once the
// provider has refused a token this replica handed out, the requests that
// still carry it to a host that refused it are sent with the token the
// fleet now keeps for the same credential, when it keeps another: the same
// app's, which the SDK would have been handed had it exchanged again. The
// refused call itself has reached the SDK as the provider answered it.

// deadToken is a token of handed the provider refused: the answers that
// handed it out, where its replacement is looked for, the hosts that
// refused it, and the replacement found. Its fields after provider, hs and
// until are read and written with Sharer.mu held.
type deadToken struct {
	provider string
	hs       []handed
	until    time.Time // when no SDK can hold it any more: its lifetime's end

	hosts     []string      // the hosts that refused it, the only ones a replacement goes to
	repl      string        // the token kept in its place, "" for none found
	replUntil time.Time     // when the kept answer of repl ends
	nextLook  time.Time     // no Redis read for a replacement before this
	looking   chan struct{} // closed when the read in flight ends; nil for none
	nextHeal  time.Time     // no heal tried again before this (healAgain)
}

// current is d's replacement while it holds: its kept answer not ended,
// and not refused since. Called with Sharer.mu held.
func (s *Sharer) current(d *deadToken, now time.Time) string {
	if d.repl != "" && now.Before(d.replUntil) && s.dead[d.repl] == nil {
		return d.repl
	}
	return ""
}

// lookEvery bounds the Redis reads for the replacement of one refused
// token while none is kept: a read a second, whatever the SDK sends.
// maxRefusingHosts bounds the hosts remembered for one token: a provider
// serves an app from a handful (WeChat's api., api2., sh.api., ...).
const (
	lookEvery        = time.Second
	maxRefusingHosts = 8
)

// hostOf is the host a request goes to as the Transport matched it: the
// Host header when set (a gateway serving several providers from one URL
// host), else the URL's.
func hostOf(req *http.Request) string {
	if req.URL == nil {
		return req.Host
	}
	return cmp.Or(req.Host, req.URL.Host)
}

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
	s.dead[tok] = &deadToken{provider: hs[0].provider, hs: hs, until: lastUntil(hs).Add(s.margin), hosts: []string{host}}
}

// sendRefused sends req, which carries tok, refused by the provider since
// this replica handed it out. To a host that refused it, the request goes
// as a copy with the fleet's current token when one is kept (watched as a
// token handed out: refused in turn, it heals), else as it came. To
// another host it goes as it came, and a refusal there adds the host.
func (s *Sharer) sendRefused(base http.RoundTripper, req *http.Request, tok string, d *deadToken) (*http.Response, error) {
	host := hostOf(req)
	s.mu.Lock()
	refusedHere := slices.Contains(d.hosts, host)
	s.mu.Unlock()
	if !refusedHere {
		resp, refused, err := sendChecked(base, req, d.provider)
		if refused {
			s.mu.Lock()
			if len(d.hosts) < maxRefusingHosts && !slices.Contains(d.hosts, host) {
				d.hosts = append(d.hosts, host)
			}
			s.mu.Unlock()
		}
		return resp, err
	}
	repl := s.replacement(req.Context(), tok, d)
	if repl == "" {
		resp, refused, err := sendChecked(base, req, d.provider)
		if refused {
			s.healAgain(req.Context(), d)
		}
		return resp, err
	}
	s.count(d.provider, Replaced)
	sent := tokenform.Replace(req, tok, repl)
	s.mu.Lock()
	provider, handed := s.handedFor(repl)
	s.mu.Unlock()
	if !handed {
		// Forgotten since it was found (the map was full): sent, not watched.
		return base.RoundTrip(sent)
	}
	return s.sendWatched(base, sent, repl, provider)
}

// healAgain heals tok again, refused again with no other token kept for
// its credential: the kept answer may still hold tok, its heal capped
// (another invalidation within the gap) or lost to a Redis error. Tried
// again only on refusals, at most once a lookEvery per token, and within
// the caps, it lets the next exchange fetch a new token once the caps
// allow; before, nobody healed it again, and every exchange was handed
// the refused token until its kept answer ended.
func (s *Sharer) healAgain(ctx context.Context, d *deadToken) {
	now := s.now()
	s.mu.Lock()
	due := !now.Before(d.nextHeal)
	if due {
		d.nextHeal = now.Add(lookEvery)
	}
	s.mu.Unlock()
	if due {
		s.healAnswers(ctx, d.hs)
	}
}

// replacement returns the token to send in place of tok, which the
// provider refused: the token kept now for a credential that handed tok
// out, when it is another that the provider has not refused; "" when none
// is. What it found is remembered until its kept answer ends, so that a
// request costs a Redis read only while no replacement is known, at most
// one a second (lookEvery) for each refused token; requests that arrive
// while that read is in flight wait for it (bounded by their context),
// rather than go with the refused token. The read is the fleet's, not the
// caller's: a caller that gives up does not end it.
func (s *Sharer) replacement(ctx context.Context, tok string, d *deadToken) string {
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
	if repl := s.current(d, now); repl != "" {
		s.mu.Unlock()
		return repl
	}
	if ch := d.looking; ch != nil {
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ""
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.current(d, now)
	}
	if now.Before(d.nextLook) {
		s.mu.Unlock()
		return ""
	}
	d.nextLook = now.Add(lookEvery)
	done := make(chan struct{})
	d.looking = done
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		d.looking = nil
		s.mu.Unlock()
		close(done)
	}()
	return s.look(ctx, tok, d, now)
}

// look reads the kept answers of the credentials that handed tok out for
// a replacement, and records the one found in d.
func (s *Sharer) look(ctx context.Context, tok string, d *deadToken, now time.Time) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), peekTimeout)
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
		toks, life, ok := check(h.ex, h.path, raw)
		if !ok {
			continue
		}
		repl := sameKind(toks, h.appOnly)
		if repl == "" || repl == tok {
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
		// watched as one handed out.
		s.remember(repl, handed{provider: h.provider, key: h.key, tag: h.k.tagOf(toks[0].Value), until: until, appOnly: h.appOnly, ex: h.ex, path: h.path, k: h.k})
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
