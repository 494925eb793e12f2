package dingtalktest

// Revoke makes tok invalid at once, as DingTalk does to a token when the
// app's secret is reset: calls with it answer 40014 (old API) or 401
// InvalidAuthentication (new API), and the next exchange of its app (or
// suite and org) issues a new token.
func (s *Server) Revoke(tok string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.tokens, tok)
	for k, t := range s.issued {
		if t == tok {
			delete(s.issued, k)
		}
	}
}

// Fetches returns how many token exchanges of app (an app key, or a suite
// key) in org (the customer org of a suite's exchange; "" for an app's)
// were answered with a token, on any token endpoint.
func (s *Server) Fetches(app, org string) int {
	n := 0
	for _, r := range s.Requests() {
		if isTokenPath(r.Path) && r.App == app && r.Org == org && r.Status == 200 && r.Code == "" {
			n++
		}
	}
	return n
}
