package server

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMaxConnsAboveFileLimitRefusesToStart: a --max-conns the open-file
// limit cannot hold stops the server before it touches the data dir.
func TestMaxConnsAboveFileLimitRefusesToStart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	cfg := dataDirConfig(dir, 0, nil)
	cfg.MaxConns = 1 << 40
	err := Run(context.Background(), cfg)
	if err == nil {
		t.Fatal("Run started with --max-conns above the open-file limit")
	}
	mustContain(t, err, "--max-conns 1099511627776 is above what the open-file limit allows", "ulimit -n")
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused start created the data dir (stat: %v)", err)
	}
}

// TestLimitsAreWired: the Config's limits reach the listener, and its
// metrics are served.
func TestLimitsAreWired(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	errc := make(chan error, 1)
	cfg := dataDirConfig(t.TempDir(), 1, ready)
	cfg.MaxConns, cfg.MaxInflight = 8, 3
	go func() { errc <- Run(ctx, cfg) }()
	defer func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	var addr string
	select {
	case addr = <-ready:
	case err := <-errc:
		t.Fatalf("Run: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the server did not become ready")
	}
	r, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	for _, want := range []string{
		"surge_http_connections_limit 8\n",
		"surge_http_connections_open 1\n",
		"surge_http_connections_shed_total 0\n",
		"surge_http_connections_refused_total 0\n",
		"surge_http_requests_inflight 0\n", // /metrics itself is exempt
		"surge_http_requests_refused_total 0\n",
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
