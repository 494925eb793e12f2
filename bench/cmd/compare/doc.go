// Command compare benchmarks this project's limiter side by side with its
// peers, on one private redis-server, in one run, and writes BENCHMARKS.md
// and PNG charts.
//
//	cd bench && go run ./cmd/compare            # what make bench-compare runs
//	cd bench && go run ./cmd/compare -quick     # a short smoke run
package main
