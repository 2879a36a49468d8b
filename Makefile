# The two commands a new user needs: `make run` and `make test`.

GO ?= go

.PHONY: run test faults build migrate postgres

## run: install PostgreSQL when missing, then run the gateway on a private PostgreSQL under ./.data
run: postgres
	$(GO) run ./cmd/gateway serve

## test: install PostgreSQL when missing, then run every test (each test binary starts its own private server)
test: postgres
	$(GO) vet ./...
	$(GO) test -race -count=1 ./...

## faults: the fault test at length: kill -9, a PostgreSQL restart, two gateways, bad input; prints its figures
faults: postgres
	HOOKGATE_FAULTS_DURATION=$${HOOKGATE_FAULTS_DURATION:-3m} $(GO) test -count=1 -v -timeout 60m -run TestFaults ./internal/faults/

## build: a static binary at ./gateway
build:
	CGO_ENABLED=0 $(GO) build -trimpath -o gateway ./cmd/gateway

## migrate: apply pending migrations to DATABASE_URL (or the private PostgreSQL)
migrate: postgres
	$(GO) run ./cmd/gateway migrate

postgres:
	@./scripts/ensure-postgres
