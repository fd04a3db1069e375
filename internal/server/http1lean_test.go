package server

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestHTTP1LeanIsWired: by default the ticketing routes' HTTP/1.1
// requests take the lean path (its counter moves), and HTTP1Standard
// (--http1-lean=false) leaves every request to net/http.
func TestHTTP1LeanIsWired(t *testing.T) {
	for _, standard := range []bool{false, true} {
		ctx, cancel := context.WithCancel(context.Background())
		ready := make(chan string, 1)
		errc := make(chan error, 1)
		cfg := dataDirConfig(t.TempDir(), 1, ready)
		cfg.HTTP1Standard = standard
		go func() { errc <- Run(ctx, cfg) }()
		var addr string
		select {
		case addr = <-ready:
		case err := <-errc:
			t.Fatalf("Run: %v", err)
		case <-time.After(30 * time.Second):
			t.Fatal("the server did not become ready")
		}
		client := &http.Client{Transport: &http.Transport{}, Timeout: 30 * time.Second}
		get := func(path string) string {
			t.Helper()
			r, err := client.Get("http://" + addr + path)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Body.Close()
			b, _ := io.ReadAll(r.Body)
			if r.StatusCode != http.StatusOK && r.StatusCode != http.StatusNotFound {
				t.Fatalf("GET %s: %s %s", path, r.Status, b)
			}
			return string(b)
		}
		get("/v1/reservation/1")
		get("/v1/health_check")
		metrics := get("/metrics")
		lean := strings.Contains(metrics, "surge_http1_lean_requests_total 2")
		if standard == lean {
			i := strings.Index(metrics, "surge_http1_lean_requests_total")
			t.Errorf("HTTP1Standard %v: lean path counter %q", standard, metrics[max(i, 0):min(len(metrics), max(i, 0)+60)])
		}
		client.CloseIdleConnections()
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}
