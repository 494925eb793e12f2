package providers

import (
	"net/http"
	"strings"
)

// HostSet is the hosts a profile handles, for its Match. Hosts compare
// without regard to case, and an entry without a port matches that host on
// any port ("127.0.0.1" matches an emulator on 127.0.0.1:43817).
type HostSet map[string]bool

// NewHostSet builds a HostSet from "host" or "host:port" entries.
func NewHostSet(hosts []string) HostSet {
	s := make(HostSet, len(hosts))
	for _, h := range hosts {
		s[strings.ToLower(h)] = true
	}
	return s
}

// Match reports whether the request goes to one of the hosts.
func (s HostSet) Match(req *http.Request) bool {
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

// Must returns p, or panics with err: the presets' MustProfile, for configs
// known to be valid.
func Must(p Profile, err error) Profile {
	if err != nil {
		panic(err)
	}
	return p
}
