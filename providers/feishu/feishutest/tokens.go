package feishutest

import (
	"strings"
	"time"
)

// issuedToken is the token an exchange of one owner last returned.
type issuedToken struct {
	tok     string
	expires time.Time // emulated
}

// renewBelow is how much of a token's lifetime must remain for a second
// exchange to return it again.
const renewBelow = 30 * time.Minute

// reuseLocked answers a token exchange of owner: Feishu returns the same token while at least 30 minutes of it remain, a new one (both valid) below that (PROVIDERS.md, "What a second exchange does").
// It returns the token and its lifetime left in seconds.
func (s *Server) reuseLocked(owner string, emu time.Time) (string, int) {
	if t, ok := s.issued[owner]; ok {
		if left := t.expires.Sub(emu); left > renewBelow {
			return t.tok, int(left / time.Second)
		}
	}
	tok := s.em.IssueLocked(owner, emu)
	if s.issued == nil {
		s.issued = map[string]issuedToken{}
	}
	s.issued[owner] = issuedToken{tok: tok, expires: emu.Add(s.em.TokenTTL())}
	return tok, int(s.em.TokenTTL() / time.Second)
}

// Revoke makes tok invalid at once (a secret reset in the console): calls
// with it answer 99991663, and the next exchange issues a new token.
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

// Fetches returns how many tenant_access_token exchanges of app were
// answered with a token.
func (s *Server) Fetches(app string) int {
	n := 0
	for _, r := range s.Requests() {
		if r.App == app && strings.Contains(r.Path, "tenant_access_token") && r.Code == 0 {
			n++
		}
	}
	return n
}
