# The README's two commands: `go run ./cmd/presenced` runs the server in dev
# mode; `make test` runs every test (Go with -race, then the end-to-end suite
# with the real socket.io-client).
GO ?= go
BIN := bin/presenced
# golangci-lint, pinned: installed into bin/ by `make lint` when missing.
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT := bin/golangci-lint-$(GOLANGCI_LINT_VERSION)/golangci-lint

.PHONY: build test test-go test-fuzz test-e2e test-compose vet lint e2e-deps clean

build:
	$(GO) build -o $(BIN) ./cmd/presenced

# The server builds on macOS and Windows too (the load tool is Linux only).
vet:
	$(GO) vet ./...
	GOOS=darwin $(GO) vet ./...
	GOOS=windows $(GO) vet ./...

$(GOLANGCI_LINT):
	GOBIN=$(CURDIR)/$(dir $(GOLANGCI_LINT)) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

# .golangci.yml; two workers (the test machines are small)
lint: $(GOLANGCI_LINT)
	$(GOLANGCI_LINT) run --concurrency 2 ./...

test-go:
	$(GO) test -race -count=1 ./...

# Every fuzz target, briefly (FUZZTIME=1m for longer runs).
test-fuzz:
	GO=$(GO) ./scripts/fuzz-all.sh

e2e-deps:
	cd e2e && { [ node_modules/.package-lock.json -nt package-lock.json ] || npm ci --no-audit --no-fund; }

test-e2e: build e2e-deps
	cd e2e && PRESENCED_BIN=$(CURDIR)/$(BIN) npm test

# docker-compose.yml is for users with a Docker engine; here it is validated.
test-compose:
	PRESENCE_JWT_SECRET=compose-check-secret-0123 docker-compose -f docker-compose.yml config -q
	mkdir -p bin
	PRESENCE_JWT_SECRET=compose-check-secret-0123 docker-compose -f docker-compose.yml config > bin/compose.rendered.yml
	grep -c 'healthcheck:' bin/compose.rendered.yml | grep -qx 6   # three nodes, balancer, Redis, PostgreSQL
	grep -q 'appendonly' bin/compose.rendered.yml                 # Redis keeps buffered last-seen across restarts
	grep -q 'service_completed_successfully' bin/compose.rendered.yml  # nodes wait for the migration
	ip=$$(sed -n 's/^ *ipv4_address: //p' bin/compose.rendered.yml); [ -n "$$ip" ] && \
		[ "$$(grep -c "PRESENCE_TRUSTED_PROXIES: $$ip$$" bin/compose.rendered.yml)" = 3 ]   # the nodes trust the balancer alone
	PRESENCE_LB_BIND=127.0.0.1:3000 PRESENCE_LB_MONITOR=127.0.0.1:8404 PRESENCE_NODE1=127.0.0.1:1 PRESENCE_NODE2=127.0.0.1:2 PRESENCE_NODE3=127.0.0.1:3 \
		haproxy -c -q -f deploy/haproxy.cfg                            # the balancer config parses

test: vet lint e2e-deps test-go test-fuzz test-compose test-e2e

clean:
	rm -rf bin
