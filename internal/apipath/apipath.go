// Package apipath reads a request's path as the providers' front ends do:
// the path net/http sends (Sent), read as the front ends read it (Clean),
// so that the API catalogs, the token exchanges, the retries and the apps'
// learning name the same API whatever its spelling: one reading, so none
// disagrees with another.
package apipath

import (
	"net/url"
	"path"
	"strings"
)

// Clean returns p with repeated slashes merged, "." and ".." resolved and a
// trailing slash dropped: an SDK whose base URL ends in "/" calls
// "//cgi-bin/token", and "/topapi/./v2/user/get" is the API
// /topapi/v2/user/get to the provider's front end. Read as written, such a
// path escaped its API's rules and the monthly quota, and an exchange was
// neither shared nor kept from a resend that rotates the token. It
// allocates only for such a path; "" and relative paths come back as they
// are.
func Clean(p string) string {
	if p == "" || p[0] != '/' {
		return p
	}
	if strings.Contains(p, "//") || strings.Contains(p, "/.") || len(p) > 1 && p[len(p)-1] == '/' {
		return path.Clean(p)
	}
	return p
}

// Sent is the path of u as net/http sends it, which is what the provider
// reads: the decoded path, unless the path as sent escapes a "/" inside a
// segment (an ID "a%2Fb"), which the provider reads as one segment and the
// decoded path would split in two. Routing, the token exchanges, the
// retries of a rotating exchange and the apps' learning all read a
// request's path through it, so that none reads another path than the one
// called.
//
// The path as sent is u.EscapedPath(), not u.RawPath: net/http ignores a
// RawPath that no longer encodes Path (Path changed after parsing), and
// trusting it named another API than the one called. With Opaque set,
// net/http sends Opaque verbatim as the path (`Opaque = "//host/path"`,
// the net/url idiom for a path sent as written, goes out as
// "scheme://host/path"), and Path is not sent at all: the path is read
// from Opaque, after any "//host". It allocates only for a path that
// escapes a '/' or an Opaque that escapes anything else.
func Sent(u *url.URL) string {
	if u.Opaque != "" {
		return opaquePath(u.Opaque)
	}
	// EscapedPath is RawPath or Path escaped, which escapes no '/': asked
	// only when RawPath escapes one, as it allocates.
	if escapesSlash(u.RawPath) {
		if p := u.EscapedPath(); escapesSlash(p) {
			return p
		}
	}
	return u.Path
}

// opaquePath is the path net/http sends for a URL's Opaque: the part after
// "//host" (empty: "/", as in any absolute URL), up to a '?', decoded
// unless it escapes a '/' (see Sent). An Opaque that is not a path
// ("mailto"-like) comes back as it is, and no catalog or exchange knows it.
func opaquePath(o string) string {
	if i := strings.IndexByte(o, '?'); i >= 0 {
		o = o[:i]
	}
	// An absolute form ("http://host/p"), sent as it is: the front end
	// reads its path.
	if i := strings.Index(o, "://"); i > 0 && !strings.ContainsAny(o[:i], "/") {
		o = o[i+1:]
	}
	if rest, ok := strings.CutPrefix(o, "//"); ok {
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			o = rest[i:]
		} else {
			o = "/"
		}
	}
	if escapesSlash(o) || strings.IndexByte(o, '%') < 0 {
		return o
	}
	if p, err := url.PathUnescape(o); err == nil {
		return p
	}
	return o
}

// escapesSlash reports whether p, a path as sent, escapes a '/'.
func escapesSlash(p string) bool {
	return strings.Contains(p, "%2F") || strings.Contains(p, "%2f")
}
