package providers

import (
	"net/http"
	"strings"
)

// MatchHosts returns a Profile.Match that accepts requests to any of hosts,
// each written "host" or "host:port". Hosts compare without regard to case,
// and an entry without a port matches that host on any port ("127.0.0.1"
// matches an emulator on 127.0.0.1:43817). Each entry is the host alone,
// never a URL: an entry with a scheme or path matches no request, which is
// why the presets check their Hosts when built.
func MatchHosts(hosts ...string) func(*http.Request) bool {
	s := make(hostSet, len(hosts))
	for _, h := range hosts {
		s[strings.ToLower(h)] = true
	}
	return s.match
}

// hostSet is the hosts a Match accepts, lower-cased.
type hostSet map[string]bool

func (s hostSet) match(req *http.Request) bool {
	if req == nil || req.URL == nil {
		return false
	}
	h := req.URL.Host
	if h == "" {
		h = req.Host
	}
	if s[h] {
		return true
	}
	h = strings.ToLower(h)
	if s[h] {
		return true
	}
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.Contains(h[i:], "]") {
		return s[strings.Trim(h[:i], "[]")]
	}
	return false
}
