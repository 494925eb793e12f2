package providers

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/quotaware/throttle/internal/hostcheck"
)

// MatchHosts returns a Profile.Match that accepts requests to any of hosts,
// each written "host" or "host:port" ("[::1]" and "[::1]:8080" for IPv6).
// Hosts compare without regard to case or a trailing dot (the same name
// in DNS), and an entry without a port matches that host on any port
// ("127.0.0.1" matches an emulator on 127.0.0.1:43817); one with a port
// matches a request that names it or, for the scheme's default port (443
// for https, 80 for http), names none. Each entry is the host alone, never
// a URL. A request matches by its URL's host (its Host header when the URL
// has none); the Transport tries the Host header of a request sent
// elsewhere once no profile matched its URL.
//
// MatchHosts panics on an entry that is not a host (a URL, a path, a
// space, a port out of range, an empty label as in ".gw.internal" or
// "gw.internal.."), as regexp.MustCompile does on a bad pattern: such an
// entry would match no request, and the profile would limit nothing
// without a word. The presets check their Hosts with the
// same rules and return the error from New instead.
func MatchHosts(hosts ...string) func(*http.Request) bool {
	s := hostSet{any: make(map[string]bool, len(hosts))}
	for i, h := range hosts {
		if err := hostcheck.Check(h); err != nil {
			panic(fmt.Sprintf("providers.MatchHosts: entry %d %v", i, err))
		}
		host, port := splitHost(strings.ToLower(h))
		if port == "" {
			s.any[host] = true
			continue
		}
		if s.withPort == nil {
			s.withPort = make(map[string]bool)
		}
		s.withPort[host+" "+port] = true
	}
	return s.match
}

// hostSet is the hosts a Match accepts, lower-cased, without brackets or
// a trailing dot: on any port, or ("host port") on one.
type hostSet struct {
	any      map[string]bool
	withPort map[string]bool
}

func (s hostSet) match(req *http.Request) bool {
	if req == nil || req.URL == nil {
		return false
	}
	h := req.URL.Host
	if h == "" {
		h = req.Host
	}
	return s.matchHost(h, req.URL.Scheme)
}

func (s hostSet) matchHost(h, scheme string) bool {
	if h == "" {
		return false
	}
	host, port := splitHost(h)
	if s.any[host] {
		return true
	}
	lower := strings.ToLower(host)
	if lower != host && s.any[lower] {
		return true
	}
	if s.withPort == nil {
		return false
	}
	if port == "" {
		switch strings.ToLower(scheme) {
		case "https":
			port = "443"
		case "http":
			port = "80"
		}
	}
	return s.withPort[lower+" "+port]
}

// splitHost splits "host", "host:port", "[v6]" or "[v6]:port" into the
// host, without brackets or a trailing dot, and the port ("" for none).
func splitHost(h string) (host, port string) {
	if strings.HasPrefix(h, "[") {
		end := strings.IndexByte(h, ']')
		if end < 0 {
			return h, ""
		}
		return h[1:end], strings.TrimPrefix(h[end+1:], ":")
	}
	host = h
	if i := strings.LastIndexByte(h, ':'); i >= 0 && strings.IndexByte(h, ':') == i {
		host, port = h[:i], h[i+1:]
	}
	return strings.TrimSuffix(host, "."), port
}
