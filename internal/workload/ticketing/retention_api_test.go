package ticketing_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/engine/enginetest"
	"github.com/surge-run/surge/internal/workload/ticketing"
)

// TestPurgeReplaysFromTheLog: a FAILED compat reservation is purged by the
// engine's timer; with the snapshots removed, the engine rebuilds the state
// from the log alone (the Reserve with its logged retention, the timer's
// firing) and the reservation is still gone while the RESERVED one is
// there, although the API now has a retention of an hour.
func TestPurgeReplaysFromTheLog(t *testing.T) {
	dir := t.TempDir()
	open := func(retention time.Duration) (*engine.Engine, *httptest.Server) {
		eng := enginetest.OpenEngine(t, dir, engine.Options{Partitions: 2}, ticketing.Workload{})
		mux := http.NewServeMux()
		ticketing.NewAPI(eng).SetRetention(retention).Register(mux, api.NewMetrics(prometheus.NewRegistry()))
		return eng, httptest.NewServer(mux)
	}
	eng, srv := open(200 * time.Millisecond)
	if st, body := do(t, srv, "POST", "/v1/event", `{"eventName":"ev","artist":"a","areas":[{"areaId":"A","price":1,"rowCount":1,"colCount":1}]}`); st != 200 {
		t.Fatalf("create: %d %s", st, body)
	}
	var ids []string
	for range 2 {
		st, id := do(t, srv, "POST", "/v1/event/ev/reservation", `{"userId":"u","eventId":"ev","areaId":"A","numOfSeats":1,"type":"RANDOM"}`)
		if st != 200 {
			t.Fatalf("reserve: %d %s", st, id)
		}
		ids = append(ids, id)
	}
	kept, failed := ids[0], ids[1]
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, body := do(t, srv, "GET", "/v1/reservation/"+failed, "")
		if st == 404 {
			break
		}
		if st != 200 || !strings.Contains(body, "FAILED") || time.Now().After(deadline) {
			t.Fatalf("FAILED reservation: %d %s", st, body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	srv.Close()
	if err := eng.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "snap")); err != nil {
		t.Fatal(err)
	}
	eng, srv = open(time.Hour)
	defer func() { srv.Close(); eng.Close() }()
	if st, body := do(t, srv, "GET", "/v1/reservation/"+failed, ""); st != 404 {
		t.Fatalf("purged reservation after replay: %d %s", st, body)
	}
	if st, body := do(t, srv, "GET", "/v1/reservation/"+kept, ""); st != 200 || !strings.Contains(body, "RESERVED") {
		t.Fatalf("RESERVED reservation after replay: %d %s", st, body)
	}
}
