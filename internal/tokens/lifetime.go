package tokens

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
)

// countDown returns answer with its lifetime member (expires_in, expireIn
// or expire, at the top level) set to left seconds and every other byte as
// the provider sent it, so that an SDK caches a kept token for the time it
// has left. ok is false when answer has no such member holding a number, or
// more than one, or one spelt in another case: encoding/json, which SDKs
// decode with, matches keys in any case and keeps the last of repeated
// ones, so such an answer would still tell the SDK its whole lifetime.
func countDown(answer []byte, left int64) (out []byte, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(answer))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, false
	}
	start, end := -1, -1
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil, false
		}
		key, isKey := tok.(string)
		if !isKey {
			break // the closing brace
		}
		if !isLifetime(key) {
			if !skipValue(dec) {
				return nil, false
			}
			continue
		}
		if start >= 0 || key != "expires_in" && key != "expireIn" && key != "expire" {
			return nil, false
		}
		tok, err = dec.Token()
		n, isNum := tok.(json.Number)
		if err != nil || !isNum {
			return nil, false
		}
		end = int(dec.InputOffset())
		start = end - len(n)
		if start < 0 || string(answer[start:end]) != string(n) {
			return nil, false
		}
	}
	if start < 0 {
		return nil, false
	}
	out = make([]byte, 0, len(answer)+4)
	out = append(out, answer[:start]...)
	out = strconv.AppendInt(out, left, 10)
	return append(out, answer[end:]...), true
}

// isLifetime reports whether key names a lifetime member in any case.
func isLifetime(key string) bool {
	return strings.EqualFold(key, "expires_in") || strings.EqualFold(key, "expireIn") || strings.EqualFold(key, "expire")
}

// skipValue reads one value, however nested.
func skipValue(dec *json.Decoder) bool {
	depth := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
		if depth == 0 {
			return true
		}
	}
}
