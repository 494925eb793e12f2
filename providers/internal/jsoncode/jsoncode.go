package jsoncode

import (
	"unicode/utf16"
	"unicode/utf8"
)

// ValueKind tells what a top-level JSON member's value is.
type ValueKind byte

// Value kinds reported by Scan.
const (
	String  ValueKind = 's' // the value is the string's raw content, without quotes, still escaped
	Literal ValueKind = 'l' // a number, true, false or null, as written
	Object  ValueKind = 'o' // a nested object, from { to }
	Array   ValueKind = 'a' // a nested array, from [ to ]
)

// Scan calls fn for each member of the top-level JSON object in data, in
// order, with the member's raw key (escapes left as written) and raw value;
// fn returns false to stop. It reports whether data starts with an object.
//
// It is made for classifiers reading a body prefix: it does not allocate, it
// never fails on truncated input (a member cut short is simply not
// reported: a number cut in the middle would be a different number), and it
// stops at the first syntax error. It does not validate what it skips.
func Scan(data []byte, fn func(key []byte, kind ValueKind, value []byte) bool) bool {
	started, _ := ScanObject(data, fn)
	return started
}

// ScanObject is Scan that also reports whether it read the object to its
// closing brace: every member was reported (unless fn stopped it), none
// was cut short and the syntax held. A reader that must see every member,
// say every duplicate of a key, needs closed.
func ScanObject(data []byte, fn func(key []byte, kind ValueKind, value []byte) bool) (started, closed bool) {
	i := skipSpace(data, 0)
	if i < len(data) && data[i] == 0xEF && len(data) >= i+3 && data[i+1] == 0xBB && data[i+2] == 0xBF {
		i = skipSpace(data, i+3) // a UTF-8 byte order mark
	}
	if i >= len(data) || data[i] != '{' {
		return false, false
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return true, true
	}
	for {
		m, next, ok := scanMember(data, i)
		if !ok || !fn(data[m.ks:m.ke], m.kind, data[m.vs:m.ve]) {
			return true, false // truncation, bad syntax or fn's stop
		}
		i = skipSpace(data, next)
		if i < len(data) && data[i] == '}' {
			return true, true
		}
		if i >= len(data) || data[i] != ',' {
			return true, false
		}
		i++
	}
}

// member locates one object member in the scanned data: the key's content
// is data[ks:ke], the value is data[vs:ve].
type member struct {
	ks, ke, vs, ve int
	kind           ValueKind
}

// scanMember reads the member `"key": value` starting at or after i (spaces
// allowed) and returns it with the index just past its value. It reports
// false when there is no complete member there.
func scanMember(data []byte, i int) (m member, next int, ok bool) {
	i = skipSpace(data, i)
	if i >= len(data) || data[i] != '"' {
		return m, 0, false
	}
	if m.ks, m.ke, ok = scanString(data, i); !ok {
		return m, 0, false
	}
	i = skipSpace(data, m.ke+1)
	if i >= len(data) || data[i] != ':' {
		return m, 0, false
	}
	i = skipSpace(data, i+1)
	if i >= len(data) {
		return m, 0, false
	}
	m.kind, m.vs, m.ve, next, ok = scanValue(data, i)
	return m, next, ok
}

// scanValue reads the value starting at data[i] and returns its kind, its
// bounds (ve exclusive; a string's without its quotes) and the index just
// past it. It reports false when the value is cut short or missing.
func scanValue(data []byte, i int) (kind ValueKind, vs, ve, next int, ok bool) {
	switch c := data[i]; c {
	case '"':
		s, e, ok := scanString(data, i)
		return String, s, e, e + 1, ok
	case '{', '[':
		e, ok := skipNested(data, i)
		kind = Object
		if c == '[' {
			kind = Array
		}
		return kind, i, e, e, ok
	default:
		e := i
		for e < len(data) && !isDelim(data[e]) {
			e++
		}
		// A literal running to the end may be cut short: a number cut in the
		// middle would be a different number.
		return Literal, i, e, e, e < len(data) && e > i
	}
}

func isDelim(c byte) bool {
	switch c {
	case ',', '}', ']', ' ', '\t', '\r', '\n':
		return true
	}
	return false
}

func skipSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\r', '\n':
			i++
		default:
			return i
		}
	}
	return i
}

// scanString takes data[i] == '"' and returns the bounds of the content and
// whether the closing quote was found; e is the closing quote's index.
func scanString(data []byte, i int) (s, e int, ok bool) {
	s = i + 1
	for j := s; j < len(data); j++ {
		switch data[j] {
		case '\\':
			j++
		case '"':
			return s, j, true
		}
	}
	return s, len(data), false
}

// skipNested takes data[i] == '{' or '[' and returns the index just past the
// matching close, honouring strings.
func skipNested(data []byte, i int) (int, bool) {
	depth := 0
	for j := i; j < len(data); j++ {
		switch data[j] {
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return j + 1, true
			}
		case '"':
			_, e, ok := scanString(data, j)
			if !ok {
				return 0, false
			}
			j = e
		}
	}
	return 0, false
}

// Unquote decodes the raw content of a JSON string as Scan reports it.
// Bad escapes decode to U+FFFD rather than failing: the result is for
// display and matching, not for round trips.
func Unquote(raw []byte) string {
	esc := false
	for _, c := range raw {
		if c == '\\' {
			esc = true
			break
		}
	}
	if !esc {
		return string(raw)
	}
	out := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		i++
		if i >= len(raw) {
			out = utf8.AppendRune(out, utf8.RuneError)
			break
		}
		switch raw[i] {
		case '"', '\\', '/':
			out = append(out, raw[i])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := hex4(raw, i+1)
			if !ok {
				out = utf8.AppendRune(out, utf8.RuneError)
				continue
			}
			i += 4
			if utf16.IsSurrogate(r) {
				if i+2 < len(raw) && raw[i+1] == '\\' && raw[i+2] == 'u' {
					if r2, ok := hex4(raw, i+3); ok {
						if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
							out = utf8.AppendRune(out, d)
							i += 6
							continue
						}
					}
				}
				r = utf8.RuneError
			}
			out = utf8.AppendRune(out, r)
		default:
			out = utf8.AppendRune(out, utf8.RuneError)
		}
	}
	return string(out)
}

func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// Code is the error fields of a provider's JSON body, read by
// Parse. Every provider of this library names its error code
// "errcode" or "code", its message "errmsg", "message" or "msg", and DingTalk
// adds "sub_code" and "sub_msg".
type Code struct {
	// Code is "errcode", or else "code": a number's digits as written, or a
	// string's content. HasCode tells an absent code from an empty one.
	Code    string
	HasCode bool
	// CodeIsString is true when the code was a JSON string.
	CodeIsString bool
	// CodeKey is the member the code came from: "errcode" or "code".
	CodeKey string
	// SubCode is "sub_code" (DingTalk's errcode 88 wrapper), as Code.
	SubCode string
	// Message is "errmsg", else "message", else "msg".
	Message string
	// SubMsg is "sub_msg".
	SubMsg string
}

// Parse reads the error fields of the top-level object of a body
// prefix. It reports false when the prefix is not a JSON object. Members
// cut off by truncation are absent; nested objects are not searched, so a
// success body's data cannot pass for an error code.
func Parse(prefix []byte) (Code, bool) {
	var c Code
	var haveErrcode, haveMsg bool
	ok := Scan(prefix, func(key []byte, kind ValueKind, v []byte) bool {
		switch string(key) {
		case "errcode":
			if kind == String || kind == Literal {
				c.Code, c.HasCode, c.CodeIsString, haveErrcode = valueString(kind, v), true, kind == String, true
				c.CodeKey = "errcode"
			}
		case "code":
			if !haveErrcode && (kind == String || kind == Literal) {
				c.Code, c.HasCode, c.CodeIsString = valueString(kind, v), true, kind == String
				c.CodeKey = "code"
			}
		case "sub_code":
			if kind == String || kind == Literal {
				c.SubCode = valueString(kind, v)
			}
		case "errmsg":
			if kind == String {
				c.Message, haveMsg = Unquote(v), true
			}
		case "message", "msg":
			if kind == String && !haveMsg {
				c.Message = Unquote(v)
			}
		case "sub_msg":
			if kind == String {
				c.SubMsg = Unquote(v)
			}
		}
		return true
	})
	return c, ok
}

// valueString renders a scalar as a string: a string's decoded content, or a
// literal as written ("null" counts as empty).
func valueString(kind ValueKind, v []byte) string {
	if kind == String {
		return Unquote(v)
	}
	if string(v) == "null" {
		return ""
	}
	return string(v)
}

// Numeric reads a top-level integer code (member codeKey) and string
// message (member msgKey, cut to maxMsg bytes at a rune boundary) from a
// possibly truncated JSON prefix. Only a numeric code at the top level
// counts, so a success body's data (an ID, a nested "code") never passes for
// an error. WeChat and WeCom answer {"errcode", "errmsg"}, Feishu
// {"code", "msg"}.
func Numeric(prefix []byte, codeKey, msgKey string, maxMsg int) (code, msg string, ok bool) {
	Scan(prefix, func(k []byte, kind ValueKind, v []byte) bool {
		switch string(k) {
		case codeKey:
			if kind == Literal && isInteger(v) {
				code, ok = string(v), true
			}
		case msgKey:
			if kind == String {
				msg = Truncate(Unquote(v), maxMsg)
			}
		}
		return true
	})
	return code, msg, ok
}

func isInteger(v []byte) bool {
	if len(v) > 0 && v[0] == '-' {
		v = v[1:]
	}
	if len(v) == 0 || len(v) > 12 {
		return false
	}
	for _, c := range v {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// Truncate cuts s to at most n bytes at a rune boundary, for provider
// messages kept in verdicts and errors.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
