// Package jaegertest gives tests a real Jaeger to export traces to and
// read them back from.
//
// Surge's traces are only useful if a real receiver takes them as sent, so
// its end-to-end tracing tests export over OTLP (HTTP or gRPC) to Jaeger
// v2's all-in-one binary, built from the Go module proxy by
// scripts/jaeger.sh (once; it is cached), and read the spans back through
// Jaeger's HTTP query API. One Jaeger serves every test of a test binary;
// with SURGE_JAEGER_QUERY_URL, SURGE_JAEGER_OTLP_HTTP and
// SURGE_JAEGER_OTLP_GRPC set (as `scripts/jaeger.sh start` prints them),
// tests use that one instead and start nothing.
//
// The first build takes minutes (`make test` runs `scripts/jaeger.sh
// install` before the tests): before a first `go test` of such a package
// alone, run that too, or give go test a -timeout over its default 10m.
//
// A package whose tests use Start calls Main from TestMain so the Jaeger it
// may have started is stopped when its tests end (and, if they use
// internal/kafkatest too, the broker):
//
//	func TestMain(m *testing.M) { jaegertest.Main(m, kafkatest.Stop) }
package jaegertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The variables `scripts/jaeger.sh start` prints; set together, they name
// a running Jaeger to test against.
const (
	EnvQueryURL = "SURGE_JAEGER_QUERY_URL"
	EnvOTLPHTTP = "SURGE_JAEGER_OTLP_HTTP"
	EnvOTLPGRPC = "SURGE_JAEGER_OTLP_GRPC"
)

// startTimeout covers a cold build of Jaeger when `make test` did not
// build it first (`go test` on this package alone): module downloads and
// about 6 CPU-minutes of compiling, 3 to 17 minutes measured on a 2-core
// machine idle to very busy; plus its start-up (a second). It stays under
// the 20-minute timeout `make test` gives a test binary.
const startTimeout = 18 * time.Minute

// Jaeger is a running Jaeger: where to send spans, where to read them.
type Jaeger struct {
	// OTLPHTTP and OTLPGRPC are the OTLP receivers' endpoints, as
	// OTEL_EXPORTER_OTLP_ENDPOINT takes them (http://127.0.0.1:PORT).
	OTLPHTTP, OTLPGRPC string
	// Query is the query service's base URL (the UI and /api).
	Query string
}

// The Jaeger this test binary started, if any; one per binary, shared by
// all its tests.
var (
	mu       sync.Mutex
	tried    bool
	shared   *Jaeger
	dir      string
	startErr error
)

// Start returns the Jaeger for t to use: the one the environment names,
// otherwise one this test binary starts on first use (and Main stops). It
// fails t, saying why, when Jaeger cannot be built or started: these tests
// prove tracing against real software and must not be skipped silently.
func Start(t testing.TB) *Jaeger {
	t.Helper()
	if j, ok := fromEnv(); ok {
		return j
	}
	mu.Lock()
	defer mu.Unlock()
	if !tried {
		tried = true
		var log string
		shared, dir, log, startErr = start()
		if startErr == nil && strings.TrimSpace(log) != "" {
			t.Logf("jaegertest: %s", strings.TrimSpace(log))
		}
	}
	if startErr != nil {
		t.Fatalf("jaegertest: no Jaeger: %v", startErr)
	}
	return shared
}

func fromEnv() (*Jaeger, bool) {
	j := &Jaeger{OTLPHTTP: os.Getenv(EnvOTLPHTTP), OTLPGRPC: os.Getenv(EnvOTLPGRPC), Query: os.Getenv(EnvQueryURL)}
	return j, j.Query != "" && j.OTLPHTTP != "" && j.OTLPGRPC != ""
}

// Main runs m's tests, stops the Jaeger Start started (if it did), then
// runs also (e.g. kafkatest.Stop, for tests that need a broker too) and
// exits with the tests' status, or 1 if stopping failed.
func Main(m *testing.M, also ...func() error) {
	code := m.Run()
	for _, f := range append([]func() error{stop}, also...) {
		if err := f(); err != nil {
			fmt.Fprintf(os.Stderr, "jaegertest: stopping: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}
	removeSurge()
	os.Exit(code)
}

// RepoRoot walks up from the working directory (a test binary runs in its
// package's directory) to the directory holding the main go.mod (the one
// with scripts/ beside it).
func RepoRoot() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "scripts", "jaeger.sh")); err == nil {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", errors.New("no scripts/jaeger.sh above the working directory")
		}
		d = parent
	}
}

// start runs `scripts/jaeger.sh start` in a fresh directory and returns
// the Jaeger it printed, the directory and the script's progress messages.
func start() (*Jaeger, string, string, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, "", "", err
	}
	d, err := os.MkdirTemp("", "surge-jaeger-")
	if err != nil {
		return nil, "", "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	sh := filepath.Join(root, "scripts", "jaeger.sh")
	cmd := exec.CommandContext(ctx, "bash", sh, "start", d)
	// If this binary dies without running Main (a test timeout panics),
	// the script's watcher stops Jaeger.
	cmd.Env = append(os.Environ(), fmt.Sprintf("SURGE_JAEGER_WATCH_PID=%d", os.Getpid()))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		os.RemoveAll(d)
		return nil, "", "", fmt.Errorf("%s start: %v\n%s", sh, err, stderr.String())
	}
	j := &Jaeger{}
	vars := map[string]*string{EnvQueryURL: &j.Query, EnvOTLPHTTP: &j.OTLPHTTP, EnvOTLPGRPC: &j.OTLPGRPC}
	for _, line := range strings.Split(stdout.String(), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && vars[k] != nil {
			*vars[k] = v
		}
	}
	if j.Query == "" || j.OTLPHTTP == "" || j.OTLPGRPC == "" {
		os.RemoveAll(d)
		return nil, "", "", fmt.Errorf("%s start printed no endpoints:\n%s%s", sh, stdout.String(), stderr.String())
	}
	return j, d, stderr.String(), nil
}

func stop() error {
	mu.Lock()
	defer mu.Unlock()
	if dir == "" {
		return nil
	}
	defer func() { os.RemoveAll(dir); dir = "" }()
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	out, err := exec.Command("bash", filepath.Join(root, "scripts", "jaeger.sh"), "stop", dir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v\n%s", err, out)
	}
	return nil
}
