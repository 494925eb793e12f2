// Package scopekind names the kinds of penalty scope the presets give their
// routes. A scope is written "kind:id"; a preset's Classify names the scope
// a Quota verdict penalises by its kind (providers.Route.Scope) rather than
// rebuilding it.
package scopekind
