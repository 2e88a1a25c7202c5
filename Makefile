# The README's two commands: `go run ./cmd/presenced` runs the server in dev
# mode; `make test` runs every test (Go with -race, then the end-to-end suite
# with the real socket.io-client).
GO ?= go
BIN := bin/presenced

.PHONY: build test test-go test-fuzz test-e2e test-compose vet e2e-deps clean

build:
	$(GO) build -o $(BIN) ./cmd/presenced

vet:
	$(GO) vet ./...

test-go:
	$(GO) test -race -count=1 ./...

# Every fuzz target, briefly (FUZZTIME=30s for longer runs).
test-fuzz:
	GO=$(GO) ./scripts/fuzz-all.sh

e2e-deps:
	cd e2e && { [ -d node_modules ] || npm ci --no-audit --no-fund; }

test-e2e: build e2e-deps
	cd e2e && PRESENCED_BIN=$(CURDIR)/$(BIN) npm test

# docker-compose.yml is for users with a Docker engine; here it is validated.
test-compose:
	PRESENCE_JWT_SECRET=compose-check-secret-0123 docker-compose -f docker-compose.yml config -q
	PRESENCE_JWT_SECRET=compose-check-secret-0123 docker-compose -f docker-compose.yml config | grep -c 'healthcheck:' | grep -qx 3

test: vet e2e-deps test-go test-fuzz test-compose test-e2e

clean:
	rm -rf bin
