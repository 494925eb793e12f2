# make test: vet and race-test everything against a real redis-server.
# It installs nothing: a missing redis-server fails the Redis tests loudly
# (THROTTLE_REQUIRE_REDIS=1). .ci/run installs it on CI machines.
GO ?= go
FUZZTIME ?= 5s

.PHONY: test vet bench fuzz check-redis

test: vet check-redis
	THROTTLE_REQUIRE_REDIS=1 $(GO) test -race -count=1 ./...

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...

check-redis:
	@command -v redis-server >/dev/null || { echo "make test needs redis-server on PATH (apt-get install -y redis-server)"; exit 1; }

bench: check-redis
	THROTTLE_REQUIRE_REDIS=1 $(GO) test -run '^$$' -bench . -benchmem ./...
