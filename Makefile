# make test: vet and race-test everything against a real redis-server.
# It installs nothing: a missing redis-server fails the Redis tests loudly
# (THROTTLE_REQUIRE_REDIS=1). .ci/run installs it on CI machines.
GO ?= go
# make test runs every fuzz target briefly; make fuzz runs them longer. The
# short run counts executions rather than seconds: a time limit that expires
# while a fuzz worker is still starting fails the run with "context deadline
# exceeded", which would make CI flaky.
FUZZ_SHORT ?= 20000x
FUZZTIME ?= 60s
# make soak: 8 replicas, one Redis restart; CI runs a 10 s version in make test.
SOAK ?= 60s

# package:target for every fuzz target.
FUZZ_TARGETS = \
	./limiter/rule:FuzzNew \
	.:FuzzBuild \
	./providers:FuzzPeekBody \
	./providers:FuzzFoldPath \
	./providers/internal/jsoncode:FuzzParse \
	./providers:FuzzPeekRequestBody \
	./providers/internal/catalog:FuzzLookup \
	./providers/dingtalk:FuzzRouteIDs \
	./providers/wechat:FuzzRouteIDs \
	./providers/wecom:FuzzRouteIDs \
	./providers/feishu:FuzzRouteIDs \
	./providers/dingtalk:FuzzClassify \
	./providers/dingtalk:FuzzRouteKeys \
	./providers/wechat:FuzzClassify \
	./providers/wecom:FuzzClassify \
	./providers/feishu:FuzzClassify \
	.:FuzzRedactText \
	./providers/feishu:FuzzRecipient \
	./providers/wecom:FuzzMemberKeys

.PHONY: test vet bench fuzz fuzz-short soak check-redis test-floor test-integrations

# The go directive of go.mod: the oldest Go the module claims to build with.
GO_FLOOR := $(shell awk '$$1 == "go" { print $$2; exit }' go.mod)

test: vet check-redis
	THROTTLE_REQUIRE_REDIS=1 THROTTLE_SOAK=10s $(GO) test -race -count=1 ./...
	$(MAKE) fuzz-short

fuzz-short:
	@$(MAKE) --no-print-directory fuzz FUZZTIME=$(FUZZ_SHORT)

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "fuzz $$pkg $$name ($(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $$pkg; \
	done

# test-floor builds and tests the root module with the Go of its go
# directive, which GOTOOLCHAIN downloads through the module proxy.
test-floor: check-redis
	GOTOOLCHAIN=go$(GO_FLOOR) $(GO) version
	GOTOOLCHAIN=go$(GO_FLOOR) $(GO) vet ./...
	GOTOOLCHAIN=go$(GO_FLOOR) THROTTLE_REQUIRE_REDIS=1 $(GO) test -race -count=1 ./...

# test-integrations drives real SDKs (fetched through the module proxy)
# into the emulators; they live in integrations/go.mod only.
test-integrations:
	cd integrations && $(GO) vet ./... && $(GO) test -race -count=1 ./...

soak: check-redis
	THROTTLE_REQUIRE_REDIS=1 THROTTLE_SOAK=$(SOAK) $(GO) test -race -count=1 -run '^TestSoak$$' -v .

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...

check-redis:
	@command -v redis-server >/dev/null || { echo "make test needs redis-server on PATH (apt-get install -y redis-server)"; exit 1; }

bench: check-redis
	THROTTLE_REQUIRE_REDIS=1 $(GO) test -run '^$$' -bench . -benchmem ./...

# bench-compare: this project side by side with its peers on one private
# redis-server; rewrites BENCHMARKS.md and the charts in docs/. The peers
# live in bench/go.mod only.
.PHONY: bench-compare
bench-compare: check-redis
	cd bench && $(GO) run ./cmd/compare -out ../BENCHMARKS.md -docs ../docs
