package apps

import (
	"errors"
	"fmt"
	"strings"
)

// An identity as Redis holds it: "<provider>\x1f<app>\x1f<org>". Whoever
// can write to Redis can write anything there, so what is read back is
// checked as strictly as what a caller gives Learn.

// sep separates the fields of a stored identity: a control character no
// provider's app or org ID contains.
const sep = "\x1f"

// conflictValue is what Redis holds for a token claimed for two apps. It
// cannot be an identity: identities hold no NUL.
const conflictValue = "\x00conflict"

// Bounds of an identity's fields. Real IDs are tens of bytes.
const (
	maxProviderLen = 64
	maxIDLen       = 256
)

var errEmptyID = errors.New("app ID is empty")

// checkIdentity reports an identity that cannot be stored, naming the field.
func checkIdentity(a App) error {
	switch {
	case a.ID == "":
		return errEmptyID
	case len(a.Provider) > maxProviderLen || !printable(a.Provider):
		return fmt.Errorf("app Provider must be at most %d printable bytes", maxProviderLen)
	case len(a.ID) > maxIDLen || !printable(a.ID):
		return fmt.Errorf("app ID must be at most %d printable bytes", maxIDLen)
	case len(a.Org) > maxIDLen || !printable(a.Org):
		return fmt.Errorf("app Org must be at most %d printable bytes", maxIDLen)
	}
	return nil
}

// printable reports whether s holds no control character (sep and NUL
// included) and is valid UTF-8 as far as the byte ranges go.
func printable(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f || r == '\uFFFD' {
			return false
		}
	}
	return true
}

func formatIdentity(a App) string { return a.Provider + sep + a.ID + sep + a.Org }

// parseIdentity reads a stored identity; ok is false for anything that is
// not exactly three fields passing checkIdentity.
func parseIdentity(v string) (App, bool) {
	if len(v) > maxProviderLen+2*maxIDLen+2 {
		return App{}, false
	}
	provider, rest, ok1 := strings.Cut(v, sep)
	id, org, ok2 := strings.Cut(rest, sep)
	a := App{Provider: provider, ID: id, Org: org, Learned: true}
	if !ok1 || !ok2 || checkIdentity(a) != nil {
		return App{}, false
	}
	return a, true
}
