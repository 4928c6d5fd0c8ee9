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
# make build bundles this YAML into each function as tollgate.yaml
# (default: ./tollgate.yaml when there is one; CONFIG= for none).
CONFIG    ?= $(wildcard tollgate.yaml)
# LocalStack: the compose file, and the stack samlocal deploys there (its
# tables get their own prefix, apart from those the init hook creates).
LOCALSTACK := docker compose -f localstack/docker-compose.yml
STACK      ?= tollgate

.PHONY: help run run-dynamodb test bench build lint lint-template deps chromium screenshots deploy sam-check localstack-up localstack-deploy localstack-down docker-check

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 20

run: ## the whole stack in one local process on 127.0.0.1:$PORT (default 8080), embedded store
	TOLLGATE_CONFIG=$${TOLLGATE_CONFIG:-$(RUN_CONFIG)} $(GO) run ./functions/gateway

run-dynamodb: $(NPM_STAMP) ## the same process against DynamoDB Local (started and stopped with it)
	$(GO) build -o $(BIN)/local/gateway ./functions/gateway
	$(WITH_DDB) env TOLLGATE_STORE=dynamodb TOLLGATE_CREATE_TABLES=true \
		TOLLGATE_CONFIG=$${TOLLGATE_CONFIG:-$(RUN_CONFIG)} $(BIN)/local/gateway

# Packages of pure computation, whose tests run no goroutines: the race
# detector finds nothing in them and makes their tests ten times slower
# (the tokenizer's 28 s instead of 3 s). Their code still runs under -race
# inside the gateway's and the end-to-end tests.
NORACE_PKGS := ./providers/tokens/... ./providers/jsonx ./providers/pricing ./functions/config
# The end-to-end package first: go test starts packages in the order it is
# given them, two at a time, and ./tests is the longest by far, so the
# others run beside it instead of before it.
RACE_PKGS    = ./tests $(shell $(GO) list ./... | grep -v -e /providers/tokens -e /providers/jsonx -e /providers/pricing -e /functions/config$$ -e /tests$$)

# The dashboard's browser test saves its screenshots here (CI's artefacts).
ARTIFACTS := $(CURDIR)/.artifacts

test: $(NPM_STAMP) chromium ## everything: vet, cfn-lint, then every test (with the race detector where there is concurrency), DynamoDB suites on DynamoDB Local, the dashboard in headless Chromium
	$(GO) vet ./...
	@$(MAKE) --no-print-directory lint-template
	TOLLGATE_REQUIRE_DYNAMODB=1 TOLLGATE_REQUIRE_BROWSER=1 TOLLGATE_ARTIFACTS=$(ARTIFACTS) \
		$(WITH_DDB) $(GO) test -race -count=1 $(RACE_PKGS)
	$(GO) test -count=1 $(NORACE_PKGS)

bench: $(NPM_STAMP) ## every benchmark, with allocations, DynamoDB ones on DynamoDB Local
	$(WITH_DDB) $(GO) test -p 1 -run '^$$' -bench . -benchmem -count=1 ./...

build: ## a linux/arm64 bootstrap per function in bin/<function>/ for Lambda (CONFIG=path bundles a config)
	@for f in $(FUNCTIONS); do \
		echo "build $$f"; \
		GOOS=linux GOARCH=arm64 CGO_ENABLED=0 $(GO) build -tags lambda.norpc -trimpath -ldflags='-s -w' \
			-o $(BIN)/$$f/bootstrap ./functions/$$f || exit 1; \
		rm -f $(BIN)/$$f/tollgate.yaml; \
		if [ -n "$(CONFIG)" ]; then cp "$(CONFIG)" $(BIN)/$$f/tollgate.yaml || exit 1; fi; \
	done
	@if [ -n "$(CONFIG)" ]; then echo "bundled $(CONFIG) as tollgate.yaml"; fi

lint: lint-template ## gofmt, go vet and cfn-lint
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

lint-template: ## cfn-lint on template.yaml (with the SAM translator), when cfn-lint is installed
	@if command -v cfn-lint >/dev/null; then \
		echo "cfn-lint template.yaml"; cfn-lint template.yaml; \
	else \
		echo "cfn-lint not installed: template.yaml not linted (pip install cfn-lint)"; \
	fi

deploy: sam-check build ## deploy to AWS with sam (guided the first time: writes samconfig.toml)
	@if [ -f samconfig.toml ]; then sam deploy; else sam deploy --guided --capabilities CAPABILITY_IAM; fi

# sam-check says the SAM CLI is missing before anything is built.
sam-check:
	@command -v sam >/dev/null || { echo "the AWS SAM CLI is needed: https://docs.aws.amazon.com/serverless-application-model/"; exit 1; }

localstack-up: docker-check ## start LocalStack (docker compose) with tollgate's tables and master key parameter
	@if [ -z "$$LOCALSTACK_AUTH_TOKEN" ]; then echo "note: LOCALSTACK_AUTH_TOKEN is not set; recent LocalStack images need one (see README, Try it on LocalStack)"; fi
	$(LOCALSTACK) up -d --wait

localstack-deploy: docker-check build ## deploy the whole stack to the running LocalStack with samlocal
	@command -v samlocal >/dev/null || { echo "samlocal is needed: pip install aws-sam-cli-local"; exit 1; }
	samlocal deploy --stack-name $(STACK) --resolve-s3 --capabilities CAPABILITY_IAM \
		--no-confirm-changeset --no-fail-on-empty-changeset \
		--parameter-overrides TablePrefix=$(STACK)-stack-
	@echo "the API: awslocal apigateway get-rest-apis; call http://localhost:4566/restapis/<id>/prod/_user_request_/v1/..."

localstack-down: docker-check ## stop LocalStack and drop its state
	$(LOCALSTACK) down -v

# docker-check says what is missing before docker compose can say
# something cryptic: the docker CLI, its compose plugin, a running daemon.
docker-check:
	@command -v docker >/dev/null || { echo "LocalStack needs Docker: install Docker Engine (or Docker Desktop), https://docs.docker.com/engine/install/"; exit 1; }
	@docker compose version >/dev/null 2>&1 || { echo "LocalStack needs the Docker Compose plugin ('docker compose'): https://docs.docker.com/compose/install/linux/ (the old docker-compose v1 is not enough)"; exit 1; }
	@docker info >/dev/null 2>&1 || { echo "the Docker daemon is not running or not reachable: start it (sudo systemctl start docker) or check that you may use it (the docker group)"; exit 1; }

deps: $(NPM_STAMP) chromium ## install the Go modules, the tests' Node packages and Chromium
	$(GO) mod download

# Headless Chromium for the dashboard's browser test, from the system's
# packages (Debian's chromium) when there is none. Another apt running
# (an unattended upgrade on a fresh machine) holds apt's locks: install
# waits for dpkg's up to 10 minutes, update is tried again for 2.
chromium: ## headless Chromium for the dashboard's browser test (apt-get when missing)
	@if command -v chromium >/dev/null || command -v chromium-browser >/dev/null || command -v google-chrome >/dev/null; then \
		echo "chromium: installed"; \
	elif command -v apt-get >/dev/null; then \
		sudo=; [ "$$(id -u)" = 0 ] || sudo=sudo; \
		echo "installing chromium with apt-get"; \
		lock="-o DPkg::Lock::Timeout=600"; \
		for try in 1 2 3 4 5 6 7 8 9 10 11 12; do \
			$$sudo apt-get $$lock update -qq && break; \
			echo "apt-get update failed (another apt holding its lock?); trying again in 10 s"; sleep 10; \
		done; \
		$$sudo env DEBIAN_FRONTEND=noninteractive apt-get $$lock install -y -qq --no-install-recommends chromium >/dev/null; \
	else \
		echo "install Chromium or Google Chrome: the dashboard's browser test needs one"; exit 1; \
	fi

screenshots: $(NPM_STAMP) chromium ## the dashboard's browser test, writing its screenshots to docs/screenshots for the README
	TOLLGATE_REQUIRE_DYNAMODB=1 TOLLGATE_REQUIRE_BROWSER=1 TOLLGATE_UPDATE_SCREENSHOTS=1 TOLLGATE_ARTIFACTS=$(ARTIFACTS) \
		$(WITH_DDB) $(GO) test -count=1 -run TestDashboardInBrowser ./tests

$(NPM_STAMP): tests/package.json tests/package-lock.json
	@command -v npm >/dev/null || { echo "npm (Node 20) is needed for the tests' packages"; exit 1; }
	npm ci --prefix tests --no-audit --no-fund
	@touch $@
