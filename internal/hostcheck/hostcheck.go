package hostcheck

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/quotaware/throttle/internal/apihosts"
)

// Check reports why h cannot be an entry of providers.MatchHosts, or nil: the
// host alone, "host" or "host:port" ("[::1]:8080" for IPv6), never a URL.
// A scheme, path, query, user, space, empty label (".gw.internal",
// "gw..internal", "gw.internal..") or empty entry would match no request
// and turn the profile's protection off without a word, so presets reject
// them when built. The error quotes the entry and, for a URL, the host it
// holds.
func Check(h string) error {
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
		ip := net.ParseIP(host)
		if ip == nil {
			return fmt.Errorf("must hold an IPv6 address in brackets, got %q", h)
		}
		// Matched as text against the request's host, which Go writes
		// in the shortest form.
		if short := ip.String(); short != host && !strings.EqualFold(short, host) {
			return fmt.Errorf("must write the IPv6 address in its shortest form, got %q: write %q", h, "["+short+"]"+h[end+1:])
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
		} else if strconv.Itoa(n) != port {
			// Matched as text: "0443" would never match a request's 443.
			return fmt.Errorf("has a port with a leading zero, got %q: write %d", h, n)
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
		return checkLabels(h, host)
	}
	return nil
}

// checkLabels reports an empty label in host (a leading dot, "..", a
// second trailing dot, "." alone); h is the entry, quoted in the error. A
// request's host never holds one (no resolver takes such a name), and
// matching drops only one trailing dot, so the entry would match no
// request. One trailing dot, the same name in DNS, is allowed. A label
// edged with '-' is not refused: /etc/hosts, a proxy or a custom dialer
// may well resolve it (a container's name).
func checkLabels(h, host string) error {
	name := strings.TrimSuffix(host, ".")
	for label := range strings.SplitSeq(name, ".") {
		if label == "" {
			return fmt.Errorf("must not have an empty label (a leading dot, \"..\" or more than one trailing dot), got %q", h)
		}
	}
	return nil
}

// All checks every entry of a preset's Hosts with Check, that there is at
// least one, and that none is another provider's API host: provider's
// rules and catalog would limit that provider's requests, and the preset
// for it would then match none of them. The error names the field and the
// entry, e.g. `Config.Hosts[0] is a URL, got "https://api.dingtalk.com":
// write the host alone, "api.dingtalk.com"`; field is how the preset names
// it, provider the preset's name.
func All(field, provider string, hosts []string) error {
	if len(hosts) == 0 {
		return fmt.Errorf("%s must name at least one host", field)
	}
	for i, h := range hosts {
		if err := Check(h); err != nil {
			return fmt.Errorf("%s[%d] %w", field, i, err)
		}
		if other := apihosts.Provider(h); other != "" && other != provider {
			return fmt.Errorf("%s[%d] is an API host of %s, not of %s, got %q: limit it with the %s preset", field, i, other, provider, h, other)
		}
	}
	return nil
}
