package providers

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// MatchHosts returns a Profile.Match that accepts requests to any of hosts,
// each written "host" or "host:port". Hosts compare without regard to case,
// and an entry without a port matches that host on any port ("127.0.0.1"
// matches an emulator on 127.0.0.1:43817).
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

// CheckHost reports why h cannot be an entry of MatchHosts, or nil: the
// host alone, "host" or "host:port" ("[::1]:8080" for IPv6), never a URL.
// A scheme, path, query, user, space or empty entry would match no request
// and turn the profile's protection off without a word, so presets reject
// them when built. The error quotes the entry and, for a URL, the host it
// holds.
func CheckHost(h string) error {
	if h == "" {
		return errors.New("must not be empty")
	}
	if i := strings.Index(h, "://"); i >= 0 {
		if u, err := url.Parse(strings.TrimSpace(h)); err == nil && u.Host != "" {
			return fmt.Errorf("is a URL, got %q: write the host alone, %q", h, u.Host)
		}
		return fmt.Errorf("is a URL, got %q: write the host alone", h)
	}
	for i := 0; i < len(h); i++ {
		switch c := h[i]; {
		case c <= ' ' || c == 0x7f:
			return fmt.Errorf("must not hold spaces or control characters, got %q", h)
		case c == '/' || c == '?' || c == '#' || c == '\\':
			return fmt.Errorf("must be a host without a path or query, got %q", h)
		case c == '@':
			return fmt.Errorf("must be a host without a user, got %q", h)
		case c >= 0x80:
			return fmt.Errorf("must be written in ASCII (punycode for an international name), got %q", h)
		}
	}
	host, port := h, ""
	if strings.HasPrefix(h, "[") {
		end := strings.IndexByte(h, ']')
		if end < 0 || (end+1 < len(h) && h[end+1] != ':') {
			return fmt.Errorf("must read \"[IPv6]\" or \"[IPv6]:port\", got %q", h)
		}
		host, port = h[1:end], strings.TrimPrefix(h[end+1:], ":")
		if net.ParseIP(host) == nil {
			return fmt.Errorf("must hold an IPv6 address in brackets, got %q", h)
		}
		if end+1 < len(h) && port == "" {
			return fmt.Errorf("has an empty port, got %q", h)
		}
	} else if i := strings.IndexByte(h, ':'); i >= 0 {
		if strings.Count(h, ":") > 1 {
			return fmt.Errorf("must write an IPv6 address in brackets, got %q", h)
		}
		host, port = h[:i], h[i+1:]
		if port == "" {
			return fmt.Errorf("has an empty port, got %q", h)
		}
	}
	if port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || port[0] == '+' {
			return fmt.Errorf("has a port that is not a number in 1..65535, got %q", h)
		}
	}
	if host == "" {
		return fmt.Errorf("has no host name, got %q", h)
	}
	if h[0] != '[' {
		for i := 0; i < len(host); i++ {
			c := host[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_') {
				return fmt.Errorf("must be a host name or address, got %q", h)
			}
		}
	}
	return nil
}

// CheckHosts checks every entry of a preset's Hosts with CheckHost, and
// that there is at least one. The error names the field and the entry,
// e.g. `Config.Hosts[0] is a URL, got "https://api.dingtalk.com": write
// the host alone, "api.dingtalk.com"`; field is how the preset names it.
func CheckHosts(field string, hosts []string) error {
	if len(hosts) == 0 {
		return fmt.Errorf("%s must name at least one host", field)
	}
	for i, h := range hosts {
		if err := CheckHost(h); err != nil {
			return fmt.Errorf("%s[%d] %w", field, i, err)
		}
	}
	return nil
}
