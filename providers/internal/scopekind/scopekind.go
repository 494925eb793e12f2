package scopekind

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/quotaware/throttle/limiter/rule"
)

// The kinds of scope the presets use.
const (
	API     = "api"     // one API of one app
	Callers = "callers" // one API, every app calling it: a limit the provider keeps on all callers
	App     = "app"     // every API of one app
	Org     = "org"     // one company or tenant
	Egress  = "egress"  // every call leaving from this egress IP
	Entity  = "entity"  // one chat, user or robot the provider limits on its own
	Monthly = "monthly" // a calendar quota shared by a set of APIs
)

// Of builds the scope "kind:id".
func Of(kind, id string) string { return kind + ":" + id }

// Fit joins prefix and name into a rule key or scope id, replacing name by
// its hash when the whole, as a scope "api:<prefix><name>", would exceed
// rule.MaxKeyLen (the presets validate their names and catalog names are
// short, so this is a safeguard).
func Fit(prefix, name string) string {
	if len(prefix)+len(name)+len(API)+1 <= rule.MaxKeyLen {
		return prefix + name
	}
	sum := sha256.Sum256([]byte(name))
	return prefix + "#" + hex.EncodeToString(sum[:12])
}
