// Package routecache holds the routes a preset built, so that a request
// for an API (of an app, of an org) met before costs one map read. It is
// the one route cache of the four presets.
package routecache
