// Package catalog maps a request to the provider API it calls, by the
// provider's own list of API path templates, so that IDs in a path never
// make one API look like many.
//
// A template is "METHOD /path" or "/path" (any method), with a path
// parameter written "{name}" or ":name" standing for one non-empty segment.
// Lookup walks a trie of segments: a literal segment beats a parameter, and
// a branch that dead-ends gives way to the parameter beside it, so
// /users/search and /users/{id} both resolve. Lookup allocates nothing.
package catalog
