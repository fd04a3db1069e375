// h2spec, the HTTP/2 conformance suite, pinned for scripts/h2spec.sh,
// which builds its cmd/h2spec from this module into bin/tools, so that
// Surge's own go.mod carries none of its dependencies and go.sum pins
// every one (h2spec v2.2.1 has no go.mod of its own). To move the pin:
// go get -tool github.com/summerwind/h2spec/cmd/h2spec@VERSION && go mod
// tidy (here), then run TestH2Spec (internal/api) from the repository root.
module github.com/surge-run/surge/tools/h2spec

go 1.26.8

tool github.com/summerwind/h2spec/cmd/h2spec

require (
	github.com/fatih/color v1.19.0 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/mattn/go-colorable v0.1.14 // indirect
	github.com/mattn/go-isatty v0.0.20 // indirect
	github.com/spf13/cobra v1.10.2 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
	github.com/summerwind/h2spec v2.2.1+incompatible // indirect
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
)
