package feishutest

import "time"

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
