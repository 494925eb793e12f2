// Package apipath reads a request's path as the providers' front ends do,
// so that the API catalogs and the token exchanges name the same API
// whatever its spelling: one reading, so the two never disagree.
package apipath

import (
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
