package jaegertest

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Protocol is an OTLP exporter protocol, as OTEL_EXPORTER_OTLP_PROTOCOL
// names it.
type Protocol string

// The two protocols Surge exports with.
const (
	HTTP Protocol = "http/protobuf"
	GRPC Protocol = "grpc"
)

// ExportDelay is the span batcher's delay (OTEL_BSP_SCHEDULE_DELAY) Env
// asks for: the SDK's 5 s default would make every test wait.
const ExportDelay = 100 * time.Millisecond

// readyTimeout bounds the wait for a started `surge serve` to answer
// /healthz (a cluster node first joins its Kafka group).
const readyTimeout = 90 * time.Second

// Env returns the variables that make an OpenTelemetry SDK (`surge
// serve`'s) export every span to j over p as service: the ones it sets
// win over any the test's environment has.
func (j *Jaeger) Env(p Protocol, service string) []string {
	endpoint := j.OTLPHTTP
	if p == GRPC {
		endpoint = j.OTLPGRPC
	}
	return []string{
		"OTEL_SDK_DISABLED=false",
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + endpoint,
		"OTEL_EXPORTER_OTLP_PROTOCOL=" + string(p),
		"OTEL_SERVICE_NAME=" + service,
		"OTEL_TRACES_SAMPLER=parentbased_always_on",
		fmt.Sprintf("OTEL_BSP_SCHEDULE_DELAY=%d", ExportDelay.Milliseconds()),
	}
}

// Server is a `surge serve` exporting its traces to Jaeger.
type Server struct {
	Addr string // 127.0.0.1:PORT
	URL  string // http://Addr
	// Service is its service.name: unique to this server, so the spans of
	// a trace crossing servers say which one made them (Span.Service) and
	// Query{Service: …} finds only its traces.
	Service string
}

var serviceSeq atomic.Uint64

// Serve runs `surge serve --addr 127.0.0.1:FREE args...` until t ends,
// exporting every span to j over p, and returns once /healthz answers 200.
// Without --data-dir or --kafka in args it serves on a fresh data
// directory. Its service name is ServiceName's. The binary is built once per test binary.
func (j *Jaeger) Serve(t testing.TB, p Protocol, args ...string) Server {
	t.Helper()
	bin := surgeBinary(t)
	addr := freeAddr(t)
	srv := Server{Addr: addr, URL: "http://" + addr, Service: ServiceName(t)}
	if !slices.ContainsFunc(args, isStoreFlag) {
		args = append(args, "--data-dir", filepath.Join(t.TempDir(), "data"))
	}
	logf, err := os.Create(filepath.Join(t.TempDir(), "serve.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"serve", "--addr", addr}, args...)...)
	cmd.Env = append(os.Environ(), j.Env(p, srv.Service)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("%s (surge serve %v) log:\n%s", srv.Service, args, tail(b))
		}
	})
	waitHealthy(t, srv.URL+"/healthz")
	return srv
}

// Worker runs `surge worker --server srv.URL --id <its service name>
// args...` until t ends, exporting the spans of its job runs to j over p,
// and returns its service name (also its worker id, so a test can tell
// its spans and its jobs apart). It returns at once: the worker connects
// when it can.
func (j *Jaeger) Worker(t testing.TB, p Protocol, srv Server, args ...string) string {
	t.Helper()
	bin := surgeBinary(t)
	service := ServiceName(t)
	dir := t.TempDir()
	logf, err := os.Create(filepath.Join(dir, "worker.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"worker", "--server", srv.URL, "--id", service, "--state-dir", dir}, args...)...)
	cmd.Env = append(os.Environ(), j.Env(p, service)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("%s (surge worker %v) log:\n%s", service, args, tail(b))
		}
	})
	return service
}

var serviceChars = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// ServiceName returns a service name no other server of this run, nor of
// an earlier run against the same Jaeger, has: "surge-", the test's name,
// a random part and a counter.
func ServiceName(t testing.TB) string {
	var r [4]byte
	if _, err := rand.Read(r[:]); err != nil {
		t.Fatalf("jaegertest: random service suffix: %v", err)
	}
	return fmt.Sprintf("surge-%s-%s-%d", serviceChars.ReplaceAllString(t.Name(), "-"), hex.EncodeToString(r[:]), serviceSeq.Add(1))
}

// isStoreFlag: the argument says where the server keeps its log.
func isStoreFlag(arg string) bool {
	for _, f := range []string{"--data-dir", "--kafka"} {
		if arg == f || strings.HasPrefix(arg, f+"=") {
			return true
		}
	}
	return false
}

// The surge binary this test binary built; Main removes it.
var (
	surgeOnce sync.Once
	surgeDir  string
	surgeBin  string
	surgeErr  error
)

func surgeBinary(t testing.TB) string {
	t.Helper()
	surgeOnce.Do(func() {
		root, err := RepoRoot()
		if err != nil {
			surgeErr = err
			return
		}
		if surgeDir, surgeErr = os.MkdirTemp("", "surge-bin-"); surgeErr != nil {
			return
		}
		surgeBin = filepath.Join(surgeDir, "surge")
		cmd := exec.Command("go", "build", "-o", surgeBin, "./cmd/surge")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			surgeErr = fmt.Errorf("go build ./cmd/surge: %v\n%s", err, out)
		}
	})
	if surgeErr != nil {
		t.Fatalf("jaegertest: %v", surgeErr)
	}
	return surgeBin
}

func removeSurge() {
	if surgeDir != "" {
		os.RemoveAll(surgeDir)
	}
}

func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func waitHealthy(t testing.TB, u string) {
	t.Helper()
	deadline := time.Now().Add(readyTimeout)
	for {
		resp, err := http.Get(u)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready after %v: %v", u, readyTimeout, err)
		}
		time.Sleep(pollInterval)
	}
}

func tail(b []byte) []byte {
	const keep = 4000
	if len(b) > keep {
		return b[len(b)-keep:]
	}
	return b
}
