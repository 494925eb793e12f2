package wecomtest

import "time"

// renewBelow is how much of a token's lifetime must remain for a second
// exchange to return it again: WeCom returns the same token within its
// lifetime (PROVIDERS.md, "What a second exchange does").
const renewBelow = 0

// reuseLocked answers a token exchange of key (a company's app: its corp
// and secret; a suite; an authorised company), whose tokens belong to
// owner; it returns the token and its lifetime left in seconds.
func (s *Server) reuseLocked(key, owner string, emu time.Time) (string, int) {
	return s.em.ReuseLocked(key, owner, emu, renewBelow)
}

// Revoke makes tok invalid at once, as WeCom does to a token it
// invalidates early: calls with it answer 40014, and the next exchange
// issues a new token.
func (s *Server) Revoke(tok string) { s.em.Revoke(tok) }
