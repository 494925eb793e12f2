// Package redistest starts real redis-server processes on loopback ports for
// tests: a single node, or a cluster (see cluster.go).
//
// Without the redis-server binary the tests that need it are skipped with a
// clear message, unless THROTTLE_REQUIRE_REDIS=1 (set by make test and CI),
// where a missing binary fails them.
package redistest
