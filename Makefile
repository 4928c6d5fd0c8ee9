# tollgate — the commands. `make help` lists them.

GO        ?= go
BIN       := bin
FUNCTIONS := $(notdir $(patsubst %/main.go,%,$(wildcard functions/*/main.go)))
# make run reads ./tollgate.yaml when there is one, else the example.
RUN_CONFIG := $(if $(wildcard tollgate.yaml),tollgate.yaml,functions/gateway/tollgate.example.yaml)

.PHONY: help run test bench build lint

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 20

run: ## the whole stack in one local process on 127.0.0.1:$PORT (default 8080), embedded store
	TOLLGATE_CONFIG=$${TOLLGATE_CONFIG:-$(RUN_CONFIG)} $(GO) run ./functions/gateway

test: ## everything: vet, then every test with the race detector
	$(GO) vet ./...
	$(GO) test -race -count=1 ./...

bench: ## the benchmarks, with allocations
	$(GO) test -run '^$$' -bench . -benchmem -count=1 ./...

build: ## a linux/arm64 bootstrap per function in bin/<function>/ for Lambda
	@for f in $(FUNCTIONS); do \
		echo "build $$f"; \
		GOOS=linux GOARCH=arm64 CGO_ENABLED=0 $(GO) build -tags lambda.norpc -trimpath -ldflags='-s -w' \
			-o $(BIN)/$$f/bootstrap ./functions/$$f || exit 1; \
	done

lint: ## gofmt and go vet
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
