package bodyscan

import (
	"bytes"
	"net/http"
	"strings"

	"github.com/quotaware/throttle/providers"
	"github.com/quotaware/throttle/providers/internal/jsoncode"
)

// Member is one top-level member whose key is one of the names asked for.
type Member struct {
	Name  string // the name asked for that the key matched
	Kind  jsoncode.ValueKind
	Value string // a string's value unescaped; a literal as written
}

// Read reads at most limit bytes of req's body (providers.PeekRequestBody,
// which leaves the body as it was) and returns every top-level member whose
// key, unescaped, equals one of names without regard to case: Go's
// encoding/json matches a field so, and a body may repeat a key (decoders
// keep the first or the last), so every occurrence counts. At most max
// members are returned; more make whole false.
//
// whole reports that every member of the body was seen: it was read to
// its end within limit and its object closed. Otherwise a member Read did
// not see (past the limit, after a syntax error) may still name an entity,
// and the caller must charge the request conservatively as well.
func Read(req *http.Request, limit, max int, names ...string) (members []Member, whole bool) {
	prefix, complete := providers.PeekRequestBody(req, limit)
	if complete && len(bytes.TrimSpace(prefix)) == 0 {
		return nil, true // no body names nothing
	}
	_, closed := jsoncode.ScanObject(prefix, func(k []byte, kind jsoncode.ValueKind, v []byte) bool {
		name := match(k, names)
		if name == "" {
			return true
		}
		if len(members) == max {
			complete = false
			return false
		}
		m := Member{Name: name, Kind: kind, Value: string(v)}
		if kind == jsoncode.String {
			m.Value = jsoncode.Unquote(v)
		}
		members = append(members, m)
		return true
	})
	return members, complete && closed
}

// match returns the name key stands for, or "".
func match(key []byte, names []string) string {
	for _, n := range names {
		// The common case, the key as the SDKs write it, costs no copy.
		if string(key) == n {
			return n
		}
	}
	k := string(key)
	if strings.IndexByte(k, '\\') >= 0 {
		k = jsoncode.Unquote(key)
	}
	for _, n := range names {
		if strings.EqualFold(k, n) {
			return n
		}
	}
	return ""
}
