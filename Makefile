# The two commands a newcomer needs: `make demo` and `make test`.
GO    ?= go
BIN   := bin/surge

.PHONY: build demo test vet fmt-check bench-full clean

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

# Every test, with the race detector, including the kill -9 crash tests.
test: fmt-check vet
	$(GO) test -race -count=1 -timeout 20m ./...

# The peer's published headline run: 5 groups x 200,000 reservations over
# 5 events x 80 areas x 400 seats (see docs/BENCHMARKS.md).
bench-full: build
	./$(BIN) bench ticketing -g 5 -a 80 -n 200000 -c 4 --http2 --flow both

clean:
	rm -rf bin
