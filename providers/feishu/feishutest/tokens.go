package feishutest

import (
	"strings"
	"time"
)

// renewBelow is how much of a token's lifetime must remain for a second
// exchange to return it again: Feishu returns the same token while at
// least 30 minutes of it remain, a new one (both valid) below that
// (PROVIDERS.md, "What a second exchange does").
const renewBelow = 30 * time.Minute

// reuseLocked answers a token exchange of owner; it returns the token and
// its lifetime left in seconds.
func (s *Server) reuseLocked(owner string, emu time.Time) (string, int) {
	return s.em.ReuseLocked(owner, owner, emu, renewBelow)
}

// Revoke makes tok invalid at once (a secret reset in the console): calls
// with it answer 99991663, and the next exchange issues a new token.
func (s *Server) Revoke(tok string) { s.em.Revoke(tok) }

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
