package providers

import "strings"

// maxAPILen bounds what FoldPath returns, so that an API name can go into
// rule keys, penalty scopes and metric attributes whatever the request.
const maxAPILen = 128

// maxSegment is the longest path segment kept as written: longer ones are
// tokens or data, never an API's name.
const maxSegment = 64

// foldedID replaces every segment that looks like an identifier.
const foldedID = "{id}"

// cutMarker ends a path cut at maxAPILen.
const cutMarker = "/..."

// FoldPath guesses an API name from a path alone, for a custom profile whose
// provider publishes no catalog. It cannot tell an ID made only of letters
// ("zhangsan", a union ID) from a word of an API's name, so such IDs still
// make many APIs of one: the presets name APIs by their provider's catalog
// instead, and send the paths it lacks to one stand-in API.
//
// FoldPath turns a request path into a low-cardinality API name: it drops the
// query and fragment, replaces segments that look like identifiers (numbers,
// UUIDs, long hex, base64-like tokens, mixed letters and digits, emails,
// phone numbers, escaped or non-ASCII text, anything with '=' or ';') with
// "{id}", and cuts the result at a segment boundary to at most 128
// bytes, ending it with "/..." when cut.
//
// Two paths of different shape stay distinct
// (/v1.0/contact/users/{id} and /v1.0/contact/users/{id}/departments), the
// result never carries a credential passed in the query or as a path
// parameter (no "access_token=" survives), and folding is idempotent:
// FoldPath(FoldPath(p)) == FoldPath(p). A path that needs no change is
// returned without allocating.
func FoldPath(path string) string {
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		path = path[:i]
	}
	if path == "" {
		return "/"
	}
	// Fast path: nothing to fold and short enough.
	if len(path) <= maxAPILen && !needsFold(path) {
		return path
	}
	var b strings.Builder
	b.Grow(min(len(path), maxAPILen))
	rest := path
	first := true
	for {
		seg, tail, more := strings.Cut(rest, "/")
		if isID(seg) {
			seg = foldedID
		}
		add := len(seg)
		if !first {
			add++
		}
		// Keep room for the marker unless this is the very last segment
		// and it fits exactly.
		limit := maxAPILen - len(cutMarker)
		if !more {
			limit = maxAPILen
		}
		if b.Len()+add > limit {
			b.WriteString(cutMarker)
			break
		}
		if !first {
			b.WriteByte('/')
		}
		b.WriteString(seg)
		first = false
		if !more {
			break
		}
		rest = tail
	}
	return b.String()
}

func needsFold(path string) bool {
	rest := path
	for {
		seg, tail, more := strings.Cut(rest, "/")
		if isID(seg) {
			return true
		}
		if !more {
			return false
		}
		rest = tail
	}
}

// isID reports whether a path segment names a thing rather than an API.
func isID(seg string) bool {
	if seg == "" || seg == foldedID {
		return false
	}
	if len(seg) > maxSegment {
		return true
	}
	var digits, lower, upper, hex, other int
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		switch {
		case c >= '0' && c <= '9':
			digits++
			hex++
		case c >= 'a' && c <= 'z':
			lower++
			if c <= 'f' {
				hex++
			}
		case c >= 'A' && c <= 'Z':
			upper++
			if c <= 'F' {
				hex++
			}
		case c == '-' || c == '_' || c == '.' || c == '~' || c == ':' || c == '+':
			other++
		default:
			// '%' (escaped text), '@' (email), '=' and ';' (parameters,
			// base64 padding), braces, spaces, controls, non-ASCII.
			return true
		}
	}
	letters := lower + upper
	n := len(seg)
	switch {
	case digits == n:
		return true // a number
	case letters == 0 && digits > 0:
		return true // a phone number, a date, a version-less numeric code
	case isUUID(seg):
		return true
	case hex == n && n >= 16:
		return true // long hex: hashes, open IDs
	case digits >= 2 && letters > 0 && n >= 8, digits > 0 && letters > 0 && n >= 24:
		// Mixed letters and digits: user IDs, message IDs. One digit in a
		// short segment is an API's version ("asyncsend_v2").
		return true
	case digits >= 4 && 2*digits >= n:
		return true // mostly digits: "u1234"
	case letters == n && n >= 16 && 3*upper >= n && 4*lower >= n:
		return true // random-case letters: base64-like tokens; camelCase API names have few capitals
	}
	return false
}

func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < 36; i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
				return false
			}
		}
	}
	return true
}
