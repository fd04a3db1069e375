package server

import (
	"context"
	"log/slog"
	"testing"
	"time"
)

// serveForTest runs the real server (server.Run) with cfg on a free
// loopback port and a temporary data dir, silent unless cfg says
// otherwise, stops it when the test ends (failing the test if Run
// returns an error), and returns its base URL.
func serveForTest(t testing.TB, cfg Config) string {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	errc := make(chan error, 1)
	cfg.Addr, cfg.DataDir, cfg.Ready = "127.0.0.1:0", t.TempDir(), ready
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	go func() { errc <- Run(ctx, cfg) }()
	t.Cleanup(func() {
		stop()
		if err := <-errc; err != nil {
			t.Errorf("server.Run: %v", err)
		}
	})
	select {
	case addr := <-ready:
		return "http://" + addr
	case err := <-errc:
		errc <- err // for the cleanup, which waits for Run's result
		t.Fatal(err)
	case <-time.After(30 * time.Second):
		t.Fatal("server did not start")
	}
	return ""
}
