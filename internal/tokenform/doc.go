// Package tokenform says what a provider's access token looks like and
// where a request carries it, for the two places that need both: apps,
// which learns whose token it is, and internal/tokens, which shares it and
// heals it.
package tokenform
