# The two commands a new user needs: `make run` and `make test`.

GO ?= go

.PHONY: run test faults build migrate postgres chromium promtool amtool s3

## run: install PostgreSQL when missing, build, then run the gateway in the foreground on a private PostgreSQL
## under ./.data. Make starts the binary itself (no shell, no `go run` between them), so Ctrl-C or a
## SIGTERM to make reaches the gateway, which stops its PostgreSQL before it exits.
run: postgres build
	./gateway serve

## test: install PostgreSQL, Chromium, promtool, amtool and an S3-compatible server when missing, then run every test (each test binary starts its own
## private server; the console's tests drive a headless Chromium), then the examples module's (a service
## outside hookgate's module that embeds it: its own go.mod, so ./... does not reach it)
test: postgres chromium promtool amtool s3
	$(GO) vet ./...
	$(GO) test -race -count=1 ./...
	cd examples && $(GO) vet ./... && $(GO) test -race -count=1 ./...

## faults: the fault test at length: kill -9, a PostgreSQL restart, two gateways, bad input; prints its figures
faults: postgres
	HOOKGATE_FAULTS_DURATION=$${HOOKGATE_FAULTS_DURATION:-3m} $(GO) test -count=1 -v -timeout 60m -run TestFaults ./internal/faults/

## build: a static binary at ./gateway (BIN), naming the checkout's commit in `gateway version`: go build
## records it itself only in a clone (not in a git worktree, whose .git is a file, nor with -buildvcs=false)
BIN = gateway
COMMIT = $(shell git rev-parse HEAD 2>/dev/null)$(shell test -n "$$(git status --porcelain 2>/dev/null)" && echo -dirty)
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-X github.com/hookgate/hookgate/internal/version.commit=$(COMMIT)" -o $(BIN) ./cmd/gateway

## migrate: apply pending migrations to DATABASE_URL (or the private PostgreSQL)
migrate: postgres
	$(GO) run ./cmd/gateway migrate

postgres:
	@./scripts/ensure-postgres

chromium:
	@./scripts/ensure-chromium

promtool:
	@./scripts/ensure-promtool

amtool:
	@./scripts/ensure-amtool

s3:
	@./scripts/ensure-s3
