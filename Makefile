# Build and test entry points. `make help` lists them.

GO ?= go

# DATABASE_URL is the PostgreSQL database `make run` serves from (a lib/pq URL; lib/pq
# defaults to sslmode=require, so local servers need sslmode=disable). `make run` creates
# the database if it does not exist. Override it from the environment or the command line:
#   make run DATABASE_URL='postgres://user:pass@host:5432/backfill?sslmode=disable'
DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/backfill?sslmode=disable

# Per test binary. Database tests find their server as internal/testkit/pgtest describes
# (TEST_DATABASE_URL, else PostgreSQL on 127.0.0.1:5432, else Docker).
# The tests package runs about 10 minutes under -race on 2 cores (browser, CLI, replica and
# concurrency tests in parallel); the bound leaves room on a loaded machine, within CI's 30.
TEST_TIMEOUT ?= 18m

.PHONY: help run createdb test test-short test-timing test-faults chaos ha-test fuzz bench bench-smoke generate schema lint lint-deploy build

help:
	@echo 'make run       run the API against $$DATABASE_URL (creates the database if missing)'
	@echo 'make test      all tests, with the race detector'
	@echo 'make test-timing  the tests whose assertions are wall-clock bounds, one at a time'
	@echo 'make test-short  the same without the race detector and the 100,000-run scale tests'
	@echo 'make test-faults  kill -9, outages, SIGTERM and two replicas against the real binary'
	@echo 'make chaos     the history checker under cut connections, 8 seeds x 2 modes x 30 s (docs/RELIABILITY.md)'
	@echo 'make ha-test   Patroni, etcd, HAProxy, PgBouncer: a switchover and a crash under load (docs/HA.md)'
	@echo 'make fuzz      each fuzz target for a short, bounded time'
	@echo 'make bench     benchmarks side by side with the PostgreSQL floor (docs/BENCHMARKS.md)'
	@echo 'make bench-smoke  the same at tiny sizes, about 20 s'
	@echo 'make generate  regenerate code from the OpenAPI spec (go generate ./...)'
	@echo 'make schema    regenerate migrations/schema.sql from a freshly migrated scratch database'
	@echo 'make lint      gofmt, go vet, staticcheck, go.mod tidy, and generated code matches the spec'
	@echo 'make build     build bin/api and bin/backfillctl'

run: createdb
	DATABASE_URL='$(DATABASE_URL)' $(GO) run ./cmd/api

# Creates the database named in DATABASE_URL through the server's `postgres` database,
# keeping DATABASE_URL's host, credentials and query. "already exists" is success. Other
# failures (no client tools, a lib/pq-only URL parameter libpq rejects) only warn: the
# database may well exist, and if not the API says so when it starts.
createdb:
	@url='$(DATABASE_URL)'; \
	base="$${url%%\?*}"; query="$${url#"$$base"}"; \
	db="$${base##*/}"; maint="$${base%/*}/postgres$$query"; \
	if ! command -v createdb >/dev/null 2>&1; then \
		echo "warning: createdb not found; assuming database '$$db' exists" >&2; exit 0; \
	fi; \
	if out=$$(createdb --maintenance-db="$$maint" "$$db" 2>&1); then \
		echo "created database '$$db'"; \
	elif ! echo "$$out" | grep -q 'already exists'; then \
		echo "warning: could not create database '$$db': $$out" >&2; \
	fi

test:
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...

# For iterating: no race detector (several times faster to build and run) and -short, which
# skips the 100,000-run scale tests (tests/scale_test.go) and the bench smoke run.
test-short:
	$(GO) test -short -count=1 -timeout $(TEST_TIMEOUT) ./...

# Tests whose assertions are wall-clock bounds (a DELETE within 100 ms at a million delivery
# attempts, writers within 200 ms beside it; status reads and claims beside event readers at a
# million events; a burst of creations queued, not shed, under the production admission waits),
# run one at a time on an otherwise quiet machine.
test-timing:
	BACKFILL_TIMING_TESTS=1 $(GO) test -count=1 -p 1 -parallel 1 -timeout 10m -run '^(TestWebhookDeleteOfAMillionAttemptsHoldsNoWriterBack|TestEventWritersDoNotWaitOnAHeldWebhookOrBackfill|TestEventReadersAtAMillionEventsLeaveStatusReadsAndClaimsAlone|TestBurstsOfCreatesAreQueuedNotShed)$$' ./tests/

# Fault tests start the real cmd/api binary as a child process; they carry the build tag
# `faults` so that `make test` stays fast.
test-faults:
	$(GO) test -race -tags faults -count=1 -timeout 10m ./tests/faults/

# Build tags that select extra files (tests, the floor of the bench's P9); lint checks the
# module with and without them, so that no file escapes vet and staticcheck. A new tag is
# added here.
LINT_TAGS ?= faults,ha,benchnoevents

# The history checker (tests/history_cuts_test.go) at length: clients and SDK executors against
# a service whose connections to PostgreSQL are cut at random, every answer checked against the
# database. `make test` runs it CI-sized (one seed per mode, 4 s).
CHAOS_SEEDS ?= 8
CHAOS_SECONDS ?= 30
chaos:
	HISTORY_SEEDS=$(CHAOS_SEEDS) HISTORY_SECONDS=$(CHAOS_SECONDS) \
		$(GO) test -count=1 -timeout 30m -parallel 2 -v -run '^TestHistoryUnderCutConnectionsEndsExactlyOnce$$' ./tests/

FUZZTIME ?= 10s
# Brings up deploy/ha (installing its Debian packages when missing), runs tests/ha, takes it
# down; the last line is the summary (docs/HA.md).
ha-test:
	deploy/ha/test.sh

fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzRequestDecoding$$' -fuzztime $(FUZZTIME) ./handlers/
	$(GO) test -run '^$$' -fuzz '^FuzzParseAndSlots$$' -fuzztime $(FUZZTIME) ./schedule/

# Benchmarks side by side with the floor (about 2.5 min): scratch databases on the local
# PostgreSQL (or BENCH_DATABASE_URL); prints the table of docs/BENCHMARKS.md, redraws its chart.
bench:
	$(GO) run ./cmd/bench -chart docs/bench-creation.svg

bench-smoke:
	$(GO) run ./cmd/bench -smoke

generate:
	$(GO) generate ./...

# migrations/schema.sql is the schema the migrations build, dumped from a scratch database
# that migrations/schema.sh creates and drops on the server of SCHEMA_DATABASE_URL (else
# TEST_DATABASE_URL, else PostgreSQL on 127.0.0.1:5432). Run it after adding a migration.
schema:
	GO='$(GO)' migrations/schema.sh migrations/schema.sql

# The drift check regenerates and then requires api/ and client/ to be exactly what is
# committed: a spec change without regenerated code, or hand edits to generated code, fail.
lint:
	@echo '--- gofmt'
	@unformatted=$$(gofmt -l .); \
	if [ -n "$$unformatted" ]; then \
		echo "not gofmt-formatted (run gofmt -w):"; echo "$$unformatted"; exit 1; \
	fi
	@echo '--- go vet (every build tag the module uses)'
	$(GO) vet ./...
	$(GO) vet -tags '$(LINT_TAGS)' ./...
	@echo '--- staticcheck (every build tag the module uses)'
	$(GO) tool staticcheck ./...
	$(GO) tool staticcheck -tags '$(LINT_TAGS)' ./...
	@echo '--- go.mod is tidy'
	$(GO) mod tidy -diff
	@echo '--- generated code matches the spec'
	$(GO) generate ./...
	@git diff --exit-code -- api/ client/ || \
		{ echo 'generated code differs from the committed code: run make generate and commit'; exit 1; }
	@dirty=$$(git status --porcelain -- api/ client/); \
	if [ -n "$$dirty" ]; then \
		echo 'new or changed files under api/ or client/ after go generate (commit them):'; echo "$$dirty"; exit 1; \
	fi
	@echo '--- migrations/schema.sql matches the migrations (make schema)'
	@tmp=$$(mktemp); trap 'rm -f "$$tmp"' EXIT; \
	GO='$(GO)' migrations/schema.sh "$$tmp" && diff -u migrations/schema.sql "$$tmp" || \
		{ echo 'migrations/schema.sql differs from what the migrations build: run make schema and commit'; exit 1; }
	@echo '--- deploy/ (its own module): the chart, the alert rules, the dashboard'
	$(MAKE) lint-deploy
	@echo '--- TypeScript SDK (types match the spec, tsc) and spec lint (redocly)'
	cd sdk/typescript && npm ci --no-audit --no-fund --loglevel=error && npm run --silent check

# promtool comes from Debian's prometheus package (.ci/run installs it).
# deploy/ is a module of its own: helm (pinned there as a tool) and k8s.io/api for the
# chart's test would add about a hundred modules to the service's go.mod. Its tests render
# the chart and decode every object strictly into the Kubernetes API types, and check the
# rules' and the dashboard's metric names against the metrics package, which deploy/ takes
# from this module (replace ../): after a change to go.mod here, run go mod tidy in deploy/.
STATICCHECK_VERSION = $(shell $(GO) list -m -f '{{.Version}}' honnef.co/go/tools)
lint-deploy:
	cd deploy && $(GO) tool helm lint --strict helm/backfill --set database.url=postgres://lint@db/backfill
	cd deploy && $(GO) vet ./...
	cd deploy && $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	cd deploy && $(GO) mod tidy -diff
	promtool check rules deploy/prometheus/alerts.yaml
	cd deploy/prometheus && promtool test rules alerts_test.yaml
	cd deploy && $(GO) test -count=1 ./...

build:
	$(GO) build -o bin/api ./cmd/api
	$(GO) build -o bin/backfillctl ./cmd/backfillctl
