package wecomtest

import "time"

// issuedToken is the token an exchange of one owner last returned.
type issuedToken struct {
	tok     string
	expires time.Time // emulated
}

// renewBelow is how much of a token's lifetime must remain for a second
// exchange to return it again.
const renewBelow = 0

// reuseLocked answers a token exchange of key (a company's app: its corp
// and secret; a suite; an authorised company), whose tokens belong to owner: WeCom returns the same token within its lifetime (PROVIDERS.md, "What a second exchange does").
// It returns the token and its lifetime left in seconds.
func (s *Server) reuseLocked(key, owner string, emu time.Time) (string, int) {
	if t, ok := s.issued[key]; ok {
		if left := t.expires.Sub(emu); left > renewBelow {
			return t.tok, int(left / time.Second)
		}
	}
	tok := s.em.IssueLocked(owner, emu)
	if s.issued == nil {
		s.issued = map[string]issuedToken{}
	}
	s.issued[key] = issuedToken{tok: tok, expires: emu.Add(s.em.TokenTTL())}
	return tok, int(s.em.TokenTTL() / time.Second)
}

// Revoke makes tok invalid at once, as WeCom does to a token it
// invalidates early: calls with it answer 40014, and the next exchange
// issues a new token.
func (s *Server) Revoke(tok string) {
	s.em.Lock()
	defer s.em.Unlock()
	if s.revoked == nil {
		s.revoked = map[string]bool{}
	}
	s.revoked[tok] = true
	for k, t := range s.issued {
		if t.tok == tok {
			delete(s.issued, k)
		}
	}
}
