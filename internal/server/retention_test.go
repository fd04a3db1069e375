package server

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/surge-run/surge/internal/module"
)

// runWithRetention starts the real server on dir with the given retention
// and returns its base URL and a function that stops it.
func runWithRetention(t *testing.T, dir string, retention time.Duration) (string, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	errc := make(chan error, 1)
	cfg := dataDirConfig(dir, 2, ready)
	cfg.Settings = module.Settings{"retention": retention}
	go func() { errc <- Run(ctx, cfg) }()
	select {
	case addr := <-ready:
		return "http://" + addr, func() {
			cancel()
			if err := <-errc; err != nil {
				t.Errorf("server stopped with %v", err)
			}
		}
	case err := <-errc:
		cancel()
		t.Fatalf("server did not start: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("server did not become ready")
	}
	return "", nil
}

func call(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b)
}

// TestTerminalReservationsArePurgedAfterRetention runs the server with a
// short --retention: a FAILED compat reservation and a cancelled one answer
// 404 once their retention has passed (the cached FAILED answer included),
// a RESERVED one stays, and after a restart with a longer retention it is
// still so.
func TestTerminalReservationsArePurgedAfterRetention(t *testing.T) {
	dir := t.TempDir()
	const retention = 2 * time.Second // long enough for the GET right after the reserves on a loaded machine
	base, stop := runWithRetention(t, dir, retention)
	if st, body := call(t, "POST", base+"/v1/event", `{"eventName":"ev","artist":"a","areas":[{"areaId":"A","price":1,"rowCount":1,"colCount":2}]}`); st != 200 {
		t.Fatalf("create event: %d %s", st, body)
	}
	reserve := func() string {
		st, id := call(t, "POST", base+"/v1/event/ev/reservation", `{"userId":"u","eventId":"ev","areaId":"A","numOfSeats":1,"type":"RANDOM"}`)
		if st != 200 || len(id) != 36 {
			t.Fatalf("reserve: %d %q", st, id)
		}
		return id
	}
	kept, cancelled, failed := reserve(), reserve(), reserve()
	if st, body := call(t, "GET", base+"/v1/reservation/"+failed, ""); st != 200 || !strings.Contains(body, `"FAILED"`) {
		t.Fatalf("FAILED reservation right after: %d %s", st, body)
	}
	if st, body := call(t, "DELETE", base+"/v2/reservations/"+cancelled, ""); st != 200 || !strings.Contains(body, `"CANCELLED"`) {
		t.Fatalf("cancel: %d %s", st, body)
	}
	start := time.Now()
	gone := func(id string) bool {
		st, body := call(t, "GET", base+"/v1/reservation/"+id, "")
		if st != 200 && st != 404 {
			t.Fatalf("GET %s: %d %s", id, st, body)
		}
		return st == 404
	}
	for !gone(failed) || !gone(cancelled) {
		if time.Since(start) > 20*time.Second {
			t.Fatal("terminal reservations were not purged 20 s after a retention of 2s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st, body := call(t, "DELETE", base+"/v2/reservations/"+cancelled, ""); st != 404 {
		t.Fatalf("cancel of a purged reservation: %d %s", st, body)
	}
	check := func(when string) {
		if st, body := call(t, "GET", base+"/v1/reservation/"+kept, ""); st != 200 || !strings.Contains(body, `"RESERVED"`) {
			t.Fatalf("%s: RESERVED reservation: %d %s", when, st, body)
		}
		for _, id := range []string{failed, cancelled} {
			if st, body := call(t, "GET", base+"/v2/reservations/"+id, ""); st != 404 {
				t.Fatalf("%s: purged reservation %s: %d %s", when, id, st, body)
			}
		}
	}
	check("after retention")
	stop()
	// A longer retention now must not bring anything back: replay uses the
	// retention each command was logged with.
	base, stop = runWithRetention(t, dir, time.Hour)
	defer stop()
	check("after restart")
}
