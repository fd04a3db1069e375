# The two commands a newcomer needs: `make demo` and `make test`.
GO    ?= go
BIN   := bin/surge

.PHONY: build demo test vet staticcheck fmt-check bench-full clean proto

build:
	$(GO) build -o $(BIN) ./cmd/surge

# Starts an embedded server on a temporary data dir, runs a short ticketing
# spike against it (and against a do-nothing server for the ceiling), and
# prints the report.
demo: build
	./$(BIN) bench ticketing -a 10 -n 20000 -c 4

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

# staticcheck at a pinned version, installed into bin/tools on first use
# (from the Go module proxy); any finding fails the target.
staticcheck:
	GO=$(GO) scripts/staticcheck.sh

# Every test, with the race detector, including the kill -9 crash tests.
# The cluster-mode tests need Apache Kafka: with-kafka.sh starts one
# single-node broker from Maven Central jars (scripts/kafka.sh) for the whole
# run and stops it afterwards; set SURGE_KAFKA_BROKERS to use another one.
# The tracing tests export to a real Jaeger: jaeger.sh install builds it
# from the Go module proxy into ~/.cache/surge the first time (minutes),
# here rather than inside a test binary's timeout. The console's browser
# tests (internal/console) run Debian's chromium, which
# scripts/chromium.sh installs with apt-get, here for the same reason.
# TestH2Spec (internal/api) runs the HTTP/2 conformance suite h2spec,
# which scripts/h2spec.sh builds from the Go module proxy into bin/tools.
test: fmt-check vet staticcheck
	scripts/jaeger.sh install >/dev/null
	GO=$(GO) scripts/h2spec.sh install >/dev/null
	scripts/chromium.sh install >/dev/null
	scripts/with-kafka.sh $(GO) test -race -count=1 -timeout 20m ./...
	# Every workload's API tests again, through a cluster node that serves
	# no partition: each request, reply and note crosses between nodes.
	SURGE_TEST_FORWARD=1 $(GO) test -race -count=1 -timeout 10m ./internal/workload/...

# The peer's published headline run: 5 groups x 200,000 reservations over
# 5 events x 80 areas x 400 seats (see docs/BENCHMARKS.md).
bench-full: build
	./$(BIN) bench ticketing -g 5 -a 80 -n 200000 -c 4 --http2 --flow both

# Regenerates internal/jqpb and internal/seqpb from proto/ (the generated code is committed,
# so building and testing need no protoc). Needs protoc (Debian:
# protobuf-compiler); the Go plugins are installed at pinned versions into
# bin/tools: protoc-gen-go matches the google.golang.org/protobuf runtime in
# go.mod, protoc-gen-connect-go the connectrpc.com/connect one, and
# protoc-gen-go-grpc writes the grpc-go services served on --grpc-addr.
PROTOC_GEN_GO_VERSION         := v1.36.11
PROTOC_GEN_CONNECT_GO_VERSION := v1.21.1
PROTOC_GEN_GO_GRPC_VERSION    := v1.5.1
TOOLS := $(CURDIR)/bin/tools
MODULE := github.com/surge-run/surge

proto:
	GOBIN=$(TOOLS) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	GOBIN=$(TOOLS) $(GO) install connectrpc.com/connect/cmd/protoc-gen-connect-go@$(PROTOC_GEN_CONNECT_GO_VERSION)
	GOBIN=$(TOOLS) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	rm -f internal/jqpb/*.pb.go internal/jqpb/jqpbconnect/*.connect.go internal/seqpb/*.pb.go internal/seqpb/seqpbconnect/*.connect.go
	protoc -I proto \
		--plugin=protoc-gen-go=$(TOOLS)/protoc-gen-go \
		--plugin=protoc-gen-connect-go=$(TOOLS)/protoc-gen-connect-go \
		--plugin=protoc-gen-go-grpc=$(TOOLS)/protoc-gen-go-grpc \
		--go_out=. --go_opt=module=$(MODULE) \
		--connect-go_out=. --connect-go_opt=module=$(MODULE) \
		--go-grpc_out=. --go-grpc_opt=module=$(MODULE) \
		proto/jq/*.proto proto/surge/sequencer/v1/*.proto

clean:
	rm -rf bin
