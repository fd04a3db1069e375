package bench

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/surge-run/surge/internal/server"
)

// TestConsolePollerReadsEveryPage: the --console-poll load reads routes
// that exist, every page of them, and none fails, against a real server
// holding a ticketing event (so the seat maps are read too).
func TestConsolePollerReadsEveryPage(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan string, 1)
	errc := make(chan error, 1)
	go func() {
		errc <- server.Run(ctx, server.Config{Addr: "127.0.0.1:0", DataDir: t.TempDir(), Partitions: 2,
			Ready: ready, Logger: slog.New(slog.DiscardHandler)})
	}()
	var base string
	select {
	case addr := <-ready:
		base = "http://" + addr
	case err := <-errc:
		t.Fatal(err)
	case <-time.After(30 * time.Second):
		t.Fatal("server did not start")
	}
	resp, err := http.Post(base+"/v1/event", "application/json", strings.NewReader(
		`{"eventName":"e","areas":[{"areaId":"A","price":1,"rowCount":2,"colCount":3},{"areaId":"B","price":1,"rowCount":1,"colCount":1}]}`))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("creating the event: %v %v", err, resp)
	}
	resp.Body.Close()

	p, stop := pollConsole(ctx, base)
	// One round of every page: overview 1, ticketing 2 + 2 seat maps,
	// commerce 5, jobs 3 (the default queue), sequencer 1.
	const oneRound = 1 + 4 + 5 + 3 + 1
	deadline := time.Now().Add(30 * time.Second)
	for p.requests.Load() < oneRound && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	if n := p.requests.Load(); n < oneRound {
		t.Errorf("%d reads, want at least a round of every page (%d)", n, oneRound)
	}
	if n := p.errors.Load(); n > 0 {
		t.Errorf("%d reads failed, last: %v", n, p.lastErr.Load())
	}
	cancel()
	if err := <-errc; err != nil {
		t.Error(err)
	}
}
