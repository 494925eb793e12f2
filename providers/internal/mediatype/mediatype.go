package mediatype

import "strings"

// Peekable reports whether a Content-Type may hold an error body worth
// peeking at: JSON, HTML, plain text, or none.
func Peekable(contentType string) bool {
	mt := contentType
	if i := strings.IndexByte(mt, ';'); i >= 0 {
		mt = mt[:i]
	}
	mt = strings.TrimSpace(mt)
	if mt == "" {
		return true
	}
	return IsJSON(mt) ||
		strings.EqualFold(mt, "text/html") ||
		strings.EqualFold(mt, "text/plain")
}

// IsJSON reports whether a Content-Type (parameters allowed) is JSON.
func IsJSON(contentType string) bool {
	mt := contentType
	if i := strings.IndexByte(mt, ';'); i >= 0 {
		mt = mt[:i]
	}
	mt = strings.TrimSpace(mt)
	return strings.EqualFold(mt, "application/json") ||
		strings.EqualFold(mt, "text/json") ||
		(len(mt) > 5 && strings.EqualFold(mt[len(mt)-5:], "+json"))
}

// IsHTML reports whether a Content-Type (parameters allowed) is HTML.
func IsHTML(contentType string) bool {
	mt := contentType
	if i := strings.IndexByte(mt, ';'); i >= 0 {
		mt = mt[:i]
	}
	return strings.EqualFold(strings.TrimSpace(mt), "text/html")
}
