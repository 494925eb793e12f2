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
