// Package scopekind names the kinds of penalty scope the presets give their
// routes. A scope is written "kind:id"; a preset's Classify names the scope
// a Quota verdict penalises by its kind (providers.Route.Scope) rather than
// rebuilding it.
package scopekind

// The kinds of scope the presets use.
const (
	API     = "api"     // one API of one app
	App     = "app"     // every API of one app
	Org     = "org"     // one company or tenant
	Egress  = "egress"  // every call leaving from this egress IP
	Entity  = "entity"  // one chat, user or robot the provider limits on its own
	Monthly = "monthly" // a calendar quota shared by a set of APIs
)

// Of builds the scope "kind:id".
func Of(kind, id string) string { return kind + ":" + id }
