# tollgate — the commands. `make help` lists them.

GO        ?= go
BIN       := bin
FUNCTIONS := $(notdir $(patsubst %/main.go,%,$(wildcard functions/*/main.go)))
# make run reads ./tollgate.yaml when there is one, else the example.
RUN_CONFIG := $(if $(wildcard tollgate.yaml),tollgate.yaml,functions/gateway/tollgate.example.yaml)
# Node packages the tests need (DynamoDB Local's jar, the OpenAI client),
# pinned by tests/package-lock.json, installed into tests/node_modules.
NPM_STAMP := tests/node_modules/.installed
# Runs a command with DynamoDB Local started on a free port, and stops it.
WITH_DDB  := $(GO) run ./tests/ddblocal --

.PHONY: help run run-dynamodb test bench build lint deps

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 20

run: ## the whole stack in one local process on 127.0.0.1:$PORT (default 8080), embedded store
	TOLLGATE_CONFIG=$${TOLLGATE_CONFIG:-$(RUN_CONFIG)} $(GO) run ./functions/gateway

run-dynamodb: $(NPM_STAMP) ## the same process against DynamoDB Local (started and stopped with it)
	$(GO) build -o $(BIN)/local/gateway ./functions/gateway
	$(WITH_DDB) env TOLLGATE_STORE=dynamodb TOLLGATE_CREATE_TABLES=true \
		TOLLGATE_CONFIG=$${TOLLGATE_CONFIG:-$(RUN_CONFIG)} $(BIN)/local/gateway

test: $(NPM_STAMP) ## everything: vet, then every test with the race detector, DynamoDB suites on DynamoDB Local
	$(GO) vet ./...
	TOLLGATE_REQUIRE_DYNAMODB=1 $(WITH_DDB) $(GO) test -race -count=1 ./...

bench: $(NPM_STAMP) ## every benchmark, with allocations, DynamoDB ones on DynamoDB Local
	$(WITH_DDB) $(GO) test -run '^$$' -bench . -benchmem -count=1 ./...

build: ## a linux/arm64 bootstrap per function in bin/<function>/ for Lambda
	@for f in $(FUNCTIONS); do \
		echo "build $$f"; \
		GOOS=linux GOARCH=arm64 CGO_ENABLED=0 $(GO) build -tags lambda.norpc -trimpath -ldflags='-s -w' \
			-o $(BIN)/$$f/bootstrap ./functions/$$f || exit 1; \
	done

lint: ## gofmt and go vet
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

deps: $(NPM_STAMP) ## install the Go modules and the tests' Node packages
	$(GO) mod download

$(NPM_STAMP): tests/package.json tests/package-lock.json
	@command -v npm >/dev/null || { echo "npm (Node 20) is needed for the tests' packages"; exit 1; }
	npm ci --prefix tests --no-audit --no-fund
	@touch $@
