// Package jsoncode reads the error fields of a provider's JSON body from a
// possibly truncated prefix, without allocating. Only the presets use it.
package jsoncode
