# kvroute build. `make demo` runs the whole system on this machine; `make test` runs all tests.
GO           ?= go
BIN          ?= bin/kvroute
PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.1
TOOLS        := $(CURDIR)/.tools
TEST_TIMEOUT ?= 14m

.PHONY: all build test test-long demo screenshot bench proto proto-check lint generate testdata tools fuzz clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/kvroute

## test: every test, heavy ones skipped (-short); race detector on.
test:
	bash tokenizer/testdata/fetch-llama.sh || echo "note: Llama 3.1 tokenizer not fetched; its exactness tests will be skipped"
	bash scripts/ensure-chromium.sh
	$(GO) test -short -race -count=1 -timeout $(TEST_TIMEOUT) ./...

## test-long: everything, including the heavy tests and `kvroute bench --quick`.
test-long:
	bash tokenizer/testdata/fetch-llama.sh || true
	bash scripts/ensure-chromium.sh
	$(GO) test -count=1 -timeout 60m ./...
	$(GO) run ./cmd/kvroute bench --quick

demo:
	$(GO) run ./cmd/kvroute demo $(DEMO_ARGS)

## screenshot: refresh docs/img/dashboard.png from the browser test (needs chromium).
screenshot:
	$(GO) test ./cmd/kvroute -run TestDashboardInBrowser -count=1 -update-screenshot

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

fuzz:
	$(GO) test ./kvblock -run '^$$' -fuzz FuzzKeys -fuzztime 30s

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

tools:
	@mkdir -p $(TOOLS)
	@command -v protoc >/dev/null || { echo "protoc missing: apt-get install -y protobuf-compiler"; exit 1; }
	GOBIN=$(TOOLS) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	GOBIN=$(TOOLS) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)

## proto: regenerate proto/kvroute/v1/*.pb.go with the pinned generators.
proto: tools
	PATH=$(TOOLS):$$PATH protoc -I proto \
		--go_out=proto --go_opt=paths=source_relative \
		--go-grpc_out=proto --go-grpc_opt=paths=source_relative \
		proto/kvroute/v1/*.proto

## proto-check: fail when the committed generated code is stale.
proto-check: tools
	@tmp=$$(mktemp -d); trap 'rm -rf $$tmp' EXIT; \
	PATH=$(TOOLS):$$PATH protoc -I proto \
		--go_out=$$tmp --go_opt=paths=source_relative \
		--go-grpc_out=$$tmp --go-grpc_opt=paths=source_relative \
		proto/kvroute/v1/*.proto && \
	diff -r $$tmp/kvroute/v1 proto/kvroute/v1 -x '*.proto' -x '*.go' -q >/dev/null; \
	for f in $$tmp/kvroute/v1/*.go; do cmp -s $$f proto/kvroute/v1/$$(basename $$f) || { echo "stale: proto/kvroute/v1/$$(basename $$f) (run make proto)"; exit 1; }; done; \
	echo "proto: generated code is current"

## generate: regenerate committed generated files other than proto (the tokenizer's compact model).
generate:
	$(GO) generate ./tokenizer

## testdata: regenerate the tokenizer golden vectors (needs node and npm).
testdata:
	cd tokenizer/testdata/gen && npm install --no-audit --no-fund && node gen.mjs

clean:
	rm -rf bin $(TOOLS)
