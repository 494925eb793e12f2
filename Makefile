# make test: set up what the tests need, vet, race-test everything against
# real redis-server processes, then run every fuzz target briefly. It says
# which stage it is in; the README gives its length. When redis-server is
# missing it installs it through apt-get if this user may (saying so first),
# else it prints the command to run (.ci/setup-redis). make test-short is the
# edit-test loop: vet and the tests in -short mode, no soak, no fuzzing.
GO ?= go
# make test runs every fuzz target briefly; make fuzz runs them longer. The
# short run counts executions rather than seconds: a time limit that expires
# while a fuzz worker is still starting fails the run with "context deadline
# exceeded", which would make CI flaky.
FUZZ_SHORT ?= 20000x
FUZZTIME ?= 60s
# make soak: 8 replicas, one Redis restart; CI runs a 10 s version in make test.
SOAK ?= 60s

# Tests that measure shares against a latency spread run alone (see
# internal/loadtest.Alone): other packages' load widens the spread they measure.
# Each name matches as a substring of a test's name.
ALONE_TESTS = TestHeadroomFollows|TestAcceptanceFeishuLearns|TestAcceptanceFourReplicasAtFiveTimesDemand|TestAcceptanceOneBusyChat|TestAcceptanceChatsUnderTheirLimit|TestFourReplicasAtFiveTimesDemand|TestAcceptanceIDsOfEveryShape

# package:target for every fuzz target.
FUZZ_TARGETS = \
	./apps:FuzzAnnouncement \
	./internal/tokens:FuzzCountDown \
	./limiter/rule:FuzzNew \
	./limiter:FuzzParseAnnouncement \
	./limiter:FuzzParseReserve \
	.:FuzzBuild \
	./internal/learnedhash:FuzzParse \
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
	./providers/feishu:FuzzLearn \
	./providers/wecom:FuzzMemberKeys

.PHONY: test-ops
# test-ops: the Grafana dashboard and the Prometheus alert rules in ops/
# name only series the library exports (a real scrape through the
# OpenTelemetry Prometheus exporter, in its own module, of a Transport on a
# redis-server the test starts), and promtool checks and unit-tests the
# rules and parses every dashboard query. Without promtool on PATH that
# part is skipped with a message; CI installs it and sets
# THROTTLE_REQUIRE_PROMTOOL=1.
test-ops: check-redis
	cd examples/prometheus && $(GO) vet ./... && THROTTLE_REQUIRE_REDIS=1 $(GO) test -race -count=1 -v ./...

.PHONY: test test-short vet bench fuzz fuzz-short soak check-redis test-floor test-integrations

# The go directive of go.mod: the oldest Go the module claims to build with.
GO_FLOOR := $(shell awk '$$1 == "go" { print $$2; exit }' go.mod)

test: check-redis
	@echo "==> [1/4] gofmt and go vet"
	@$(MAKE) --no-print-directory vet
	@echo "==> [2/4] go test -race ./... against real redis-server processes, with a 10 s soak (the longest stage)"
	THROTTLE_REQUIRE_REDIS=1 THROTTLE_SOAK=10s $(GO) test -race -count=1 ./...
	@echo "==> [2/4, continued] the acceptance tests that measure shares against a latency spread, one package at a time"
	THROTTLE_REQUIRE_REDIS=1 THROTTLE_ALONE=1 $(GO) test -race -count=1 -p 1 -run '$(ALONE_TESTS)' ./providers/dingtalk ./providers/feishu
	@echo "==> [3/4] every fuzz target for $(FUZZ_SHORT) executions"
	@$(MAKE) --no-print-directory fuzz-short
	@echo "==> [4/4] the operator's kit: dashboard and alert rules against a real scrape (and promtool when installed)"
	@$(MAKE) --no-print-directory test-ops
	@echo "==> make test passed"

test-short: check-redis
	@$(MAKE) --no-print-directory vet
	THROTTLE_REQUIRE_REDIS=1 $(GO) test -race -short -count=1 ./...

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
	@echo "==> set-up: redis-server and a C compiler on PATH"
	@.ci/setup-redis

bench: check-redis
	THROTTLE_REQUIRE_REDIS=1 $(GO) test -run '^$$' -bench . -benchmem ./...

# bench-compare: this project side by side with its peers on one private
# redis-server; rewrites BENCHMARKS.md and the charts in docs/. The peers
# live in bench/go.mod only.
.PHONY: bench-compare
bench-compare: check-redis
	cd bench && $(GO) run ./cmd/compare -out ../BENCHMARKS.md -docs ../docs
