package wechattest

import (
	"time"
)

// tokenState is what WeChat does on a second exchange (PROVIDERS.md, "What
// a second exchange does"): /cgi-bin/token issues a new token on every
// fetch and the previous one stops working after a grace period;
// stable_token returns the same token until 5 minutes before its end, and
// a forced refresh replaces it like /cgi-bin/token does.
type tokenState struct {
	latest  map[string]string    // "<kind>\\x00<app>" → the newest token
	expires map[string]time.Time // token → its end (emulated)
	ends    map[string]time.Time // replaced or revoked token → when it stops
	forced  map[string]*forcedRefreshes
}

// stableRenewal is how long before its end a stable token is renewed.
const stableRenewal = 5 * time.Minute

// defaultGrace is how long a replaced token keeps working.
const defaultGrace = 5 * time.Minute

// issueLocked answers one token fetch of app: the token and its lifetime
// left.
func (s *Server) issueLocked(app string, emu time.Time, stable, force bool) (string, time.Duration) {
	st := &s.issued
	if st.latest == nil {
		st.latest, st.expires, st.ends = map[string]string{}, map[string]time.Time{}, map[string]time.Time{}
	}
	kind := "token\x00"
	if stable {
		kind = "stable\x00"
	}
	prev, had := st.latest[kind+app]
	if stable && had && !force {
		if left := st.expires[prev].Sub(emu); left > stableRenewal && st.validLocked(prev, emu) {
			return prev, left
		}
	}
	tok := s.em.IssueLocked(app, emu)
	st.latest[kind+app] = tok
	st.expires[tok] = emu.Add(s.em.TokenTTL())
	if had {
		grace := s.opts.TokenGrace
		if grace <= 0 {
			grace = defaultGrace
		}
		if end, ok := st.ends[prev]; !ok || end.After(emu.Add(grace)) {
			st.ends[prev] = emu.Add(grace)
		}
	}
	return tok, s.em.TokenTTL()
}

// forceLocked decides a stable_token exchange of app with force_refresh:
// renew (counted in the day's forced refreshes), no renewal (within the gap
// after the last forced refresh: the token in force, not counted), or
// refused (the day's forced refreshes are spent).
func (s *Server) forceLocked(app string, emu time.Time) (renew, refused bool) {
	lim := s.limitsOf(app)
	st := &s.issued
	if st.forced == nil {
		st.forced = map[string]*forcedRefreshes{}
	}
	f := st.forced[app]
	if f == nil {
		f = &forcedRefreshes{}
		st.forced[app] = f
	}
	if lim.ForceRefreshGap > 0 && !f.last.IsZero() && emu.Sub(f.last) < lim.ForceRefreshGap {
		return false, false
	}
	if day := beijingDay(emu); !f.day.Equal(day) {
		f.day, f.n = day, 0
	}
	if lim.ForceRefreshDaily > 0 && f.n >= lim.ForceRefreshDaily {
		return false, true
	}
	f.n++
	f.last = emu
	return true, false
}

// forcedRefreshes are one account's forced stable_token refreshes.
type forcedRefreshes struct {
	last time.Time // the last one that renewed the token (emulated)
	day  time.Time // the Beijing day n counts
	n    int
}

// validLocked reports whether tok was neither replaced past its grace nor
// revoked at emu (its lifetime is the core's to check).
func (st *tokenState) validLocked(tok string, emu time.Time) bool {
	end, ok := st.ends[tok]
	return !ok || emu.Before(end)
}

// Revoke makes tok invalid at once, as WeChat does to a token reset in the
// console or replaced outside the fleet: calls with it answer 40001.
func (s *Server) Revoke(tok string) {
	s.em.Lock()
	defer s.em.Unlock()
	if s.issued.ends == nil {
		s.issued.latest, s.issued.expires, s.issued.ends = map[string]string{}, map[string]time.Time{}, map[string]time.Time{}
	}
	_, emu := s.em.Times()
	s.issued.ends[tok] = emu
}

// Fetches returns how many token fetches of app reached the endpoint at
// path ("/cgi-bin/token" or "/cgi-bin/stable_token") and were answered
// with a token.
func (s *Server) Fetches(app, path string) int {
	n := 0
	for _, r := range s.Requests() {
		if r.App == app && r.Path == path && r.Code == 0 {
			n++
		}
	}
	return n
}
