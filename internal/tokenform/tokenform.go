package tokenform

import "strings"

// MinLen and MaxLen bound a token's length: the providers' run from a few
// dozen to a few hundred characters.
const (
	MinLen = 8
	MaxLen = 1024
)

// Sane reports whether tok looks like a provider's access token: of a sane
// length and made of the characters the providers use.
func Sane(tok string) bool {
	if len(tok) < MinLen || len(tok) > MaxLen {
		return false
	}
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("-_.~+/=:", c) >= 0:
		default:
			return false
		}
	}
	return true
}
