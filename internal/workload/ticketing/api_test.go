package ticketing_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/wal"
	"github.com/surge-run/surge/internal/workload/ticketing"
)

// newEngine opens an engine with the ticketing workload on a fresh data
// directory, closed when the test ends.
func newEngine(t testing.TB, partitions int) *engine.Engine {
	t.Helper()
	dir := t.TempDir()
	lg, err := wal.Open(wal.Options{Dir: filepath.Join(dir, "wal"), Partitions: partitions})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.Open(engine.Options{Partitions: partitions, Log: lg, Snapshots: wal.SnapshotDir{Dir: filepath.Join(dir, "snap")}, Logger: quiet}, ticketing.Workload{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	return eng
}

// serveAPI serves a ticketing API over eng until the test ends.
func serveAPI(t *testing.T, eng *engine.Engine) *httptest.Server {
	mux := http.NewServeMux()
	ticketing.NewAPI(eng).Register(mux, api.NewMetrics(prometheus.NewRegistry()))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func newServer(t *testing.T) *httptest.Server { return serveAPI(t, newEngine(t, 4)) }

func do(t *testing.T, srv *httptest.Server, method, path, body string, hdr ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b)
}

const event = `{"eventName":"ev","artist":"a","areas":[{"areaId":"A","price":10,"rowCount":2,"colCount":3}]}`

func available(t *testing.T, srv *httptest.Server) int {
	st, body := do(t, srv, "GET", "/v2/events/ev", "")
	if st != 200 {
		t.Fatalf("GET event: %d %s", st, body)
	}
	var v struct{ AvailableSeats int }
	json.Unmarshal([]byte(body), &v)
	return v.AvailableSeats
}

func TestBadInputIsRejectedAndChangesNothing(t *testing.T) {
	srv := newServer(t)
	if st, body := do(t, srv, "POST", "/v1/event", event); st != 200 {
		t.Fatalf("create: %d %s", st, body)
	}
	cases := []struct {
		method, path, body string
		want               int
		hdr                []string
	}{
		{"POST", "/v1/event", `{`, 400, nil},
		{"POST", "/v1/event", `[]`, 400, nil},
		{"POST", "/v1/event", `{"eventName":"x"}`, 400, nil},
		{"POST", "/v1/event", `{"eventName":"x","areas":[{"areaId":"A","rowCount":0,"colCount":3}]}`, 400, nil},
		{"POST", "/v1/event", `{"eventName":"x","areas":[{"areaId":"A","rowCount":"2","colCount":3}]}`, 400, nil},
		{"POST", "/v1/event", `{"eventName":"x","areas":[{"areaId":"A","rowCount":2,"colCount":3},{"areaId":"A","rowCount":2,"colCount":3}]}`, 400, nil},
		{"POST", "/v1/event", `{"eventName":"x","eventStartTime":"tomorrow","areas":[{"areaId":"A","rowCount":2,"colCount":3}]}`, 400, nil},
		{"POST", "/v1/event", `{"eventName":"ev","areas":[{"areaId":"A","rowCount":9,"colCount":9}]}`, 409, nil},
		{"POST", "/v1/event", `{"eventName":"` + strings.Repeat("x", 2<<20) + `"}`, 413, nil},
		{"POST", "/v1/event/ev/reservation", `{"eventId":"ev","areaId":"A","numOfSeats":"2","type":"RANDOM"}`, 400, nil},
		{"POST", "/v1/event/ev/reservation", `{"eventId":"ev","numOfSeats":2,"type":"RANDOM"}`, 400, nil},
		{"POST", "/v1/event/ev/reservation", `{"eventId":"ev","areaId":"A","numOfSeats":1000000000,"type":"RANDOM"}`, 400, nil},
		{"POST", "/v1/event/ev/reservation", `{"eventId":"ev","areaId":"A","numOfSeats":1e40,"type":"RANDOM"}`, 400, nil},
		{"POST", "/v1/event/ev/reservation", `{"eventId":"ev","areaId":"A","seats":"all","type":"SELF_PICK"}`, 400, nil},
		{"POST", "/v1/event/ev/reservation", strings.Repeat(" ", 20<<10), 413, nil},
		{"POST", "/v2/reservations", `{"eventId":"ev","areaId":"A","numOfSeats":2,"type":"BEST"}`, 400, nil},
		{"POST", "/v2/reservations", `{"eventId":"ev","areaId":"A","numOfSeats":0,"type":"RANDOM"}`, 400, nil},
		{"POST", "/v2/reservations", `{"eventId":"ev","areaId":"A","seats":[{"row":5,"col":0}],"type":"SELF_PICK"}`, 400, nil},
		{"POST", "/v2/reservations", `{"eventId":"ev","areaId":"A","seats":[{"row":0,"col":0},{"row":0,"col":0}],"type":"SELF_PICK"}`, 400, nil},
		{"POST", "/v2/reservations", `{"eventId":"ev","areaId":"Z","numOfSeats":1,"type":"RANDOM"}`, 404, nil},
		{"POST", "/v2/reservations", `{"eventId":"nope","areaId":"A","numOfSeats":1,"type":"RANDOM"}`, 404, nil},
		{"POST", "/v2/reservations", `{"eventId":"ev","areaId":"A","numOfSeats":1,"type":"RANDOM"}`, 400, []string{"Idempotency-Key", strings.Repeat("k", 300)}},
		{"GET", "/v1/reservation/not-a-uuid", ``, 404, nil},
		{"GET", "/v1/reservation/6b00cec0-e876-43d6-a5e8-e7a2325600ff", ``, 404, nil},
		{"GET", "/v2/reservations/6b00cec0-e876-43d6-a5e8-e7a232560001", ``, 404, nil},
		{"DELETE", "/v2/reservations/6b00cec0-e876-43d6-a5e8-e7a232560001", ``, 404, nil},
		{"GET", "/v2/events/nope", ``, 404, nil},
	}
	for _, c := range cases {
		st, body := do(t, srv, c.method, c.path, c.body, c.hdr...)
		if st != c.want {
			t.Errorf("%s %s %.80s: status %d, want %d (%s)", c.method, c.path, c.body, st, c.want, body)
		}
		if !strings.Contains(body, `"error":`) {
			t.Errorf("%s %s: error body is not JSON {error}: %s", c.method, c.path, body)
		}
		if got := available(t, srv); got != 6 {
			t.Fatalf("%s %s %.80s changed availability to %d", c.method, c.path, c.body, got)
		}
	}
}

func TestCompatFlowAndFailureReasons(t *testing.T) {
	srv := newServer(t)
	do(t, srv, "POST", "/v1/event", event)
	st, id := do(t, srv, "POST", "/v1/event/ignored/reservation", `{"userId":"u","eventId":"ev","areaId":"A","numOfSeats":2,"type":"RANDOM"}`)
	if st != 200 || len(id) != 36 {
		t.Fatalf("POST: %d %q", st, id)
	}
	st, body := do(t, srv, "GET", "/v1/reservation/"+id, "")
	want := `{"reservationId":"` + id + `","userId":"u","eventId":"ev","areaId":"A","numOfSeats":2,"numOfSeat":0,"type":"RANDOM","seats":[{"row":0,"col":0},{"row":0,"col":1}],"state":"RESERVED","failedReason":""}` + "\n"
	if st != 200 || body != want {
		t.Fatalf("GET: %d\n%s\nwant\n%s", st, body, want)
	}
	for _, c := range []struct{ body, reason string }{
		{`{"eventId":"ev","areaId":"A","numOfSeats":0,"type":"RANDOM"}`, "invalid argument"},
		{`{"eventId":"ev","areaId":"A","numOfSeats":1,"type":"BEST"}`, "invalid type"},
		{`{"eventId":"ev","areaId":"Q","numOfSeats":1,"type":"RANDOM"}`, "invalid event/area"},
		{`{"eventId":"ev","areaId":"A","seats":[{"row":9,"col":9}],"type":"SELF_PICK"}`, "invalid seat"},
		{`{"eventId":"ev","areaId":"A","seats":[{"row":0,"col":0}],"type":"SELF_PICK"}`, "not available"},
		{`{"eventId":"ev","areaId":"A","numOfSeats":4,"type":"RANDOM"}`, "no 4 continuous seats"},
	} {
		st, id := do(t, srv, "POST", "/v1/event/ev/reservation", c.body)
		if st != 200 {
			t.Fatalf("%s: %d %s", c.body, st, id)
		}
		_, body := do(t, srv, "GET", "/v1/reservation/"+id, "")
		if !strings.Contains(body, `"state":"FAILED"`) || !strings.Contains(body, c.reason) {
			t.Errorf("%s: want FAILED with %q, got %s", c.body, c.reason, body)
		}
	}
}

func TestNativeIdempotencyAndCancel(t *testing.T) {
	srv := newServer(t)
	do(t, srv, "POST", "/v1/event", event)
	body := `{"userId":"u","eventId":"ev","areaId":"A","numOfSeats":3,"type":"RANDOM"}`
	st1, r1 := do(t, srv, "POST", "/v2/reservations", body, "Idempotency-Key", "abc")
	st2, r2 := do(t, srv, "POST", "/v2/reservations", body, "Idempotency-Key", "abc")
	if st1 != 201 || st2 != 201 || r1 != r2 {
		t.Fatalf("retry: %d %s / %d %s", st1, r1, st2, r2)
	}
	if got := available(t, srv); got != 3 {
		t.Fatalf("retry reserved again: available %d", got)
	}
	if st, _ := do(t, srv, "POST", "/v2/reservations", strings.Replace(body, "3", "2", 1), "Idempotency-Key", "abc"); st != 422 {
		t.Fatalf("key reuse with another request: %d", st)
	}
	var res struct{ ReservationID string }
	json.Unmarshal([]byte(r1), &res)
	if st, b := do(t, srv, "DELETE", "/v2/reservations/"+res.ReservationID, ""); st != 200 || !strings.Contains(b, "CANCELLED") {
		t.Fatalf("cancel: %d %s", st, b)
	}
	if got := available(t, srv); got != 6 {
		t.Fatalf("cancel did not free seats: available %d", got)
	}
	// A late retry of the original request replays it (201), showing the
	// reservation as it is now, and does not reserve again.
	if st, b := do(t, srv, "POST", "/v2/reservations", body, "Idempotency-Key", "abc"); st != 201 || !strings.Contains(b, "CANCELLED") {
		t.Fatalf("replay after cancel: %d %s", st, b)
	}
	if got := available(t, srv); got != 6 {
		t.Fatalf("replay after cancel reserved again: available %d", got)
	}
	do(t, srv, "POST", "/v2/reservations", `{"eventId":"ev","areaId":"A","numOfSeats":3,"type":"RANDOM"}`)
	do(t, srv, "POST", "/v2/reservations", `{"eventId":"ev","areaId":"A","numOfSeats":3,"type":"RANDOM"}`)
	st, b := do(t, srv, "POST", "/v2/reservations", `{"eventId":"ev","areaId":"A","numOfSeats":1,"type":"RANDOM"}`)
	if st != 409 || !strings.Contains(b, "sold out") {
		t.Fatalf("sold out: %d %s", st, b)
	}
}

// TestRandomBodiesNeverCrash throws mutated JSON at every route: each
// answer must be a 2xx/4xx, never a 5xx or a dropped connection.
func TestRandomBodiesNeverCrash(t *testing.T) {
	srv := newServer(t)
	do(t, srv, "POST", "/v1/event", event)
	seeds := []string{event, `{"userId":"u","eventId":"ev","areaId":"A","numOfSeats":2,"seats":[{"row":0,"col":1}],"type":"SELF_PICK"}`}
	paths := []string{"/v1/event", "/v1/event/ev/reservation", "/v2/reservations"}
	rng := rand.New(rand.NewPCG(3, 4))
	alphabet := []byte(`{}[]":,-0123456789eE.truefalsnul \x00AZ`)
	for i := range 600 {
		b := []byte(seeds[rng.IntN(len(seeds))])
		for range 1 + rng.IntN(4) {
			switch k := rng.IntN(3); {
			case k == 0 && len(b) > 0:
				p := rng.IntN(len(b))
				b = append(b[:p], b[p+1:]...)
			case k == 1:
				p := rng.IntN(len(b) + 1)
				b = append(b[:p], append([]byte{alphabet[rng.IntN(len(alphabet))]}, b[p:]...)...)
			default:
				if len(b) > 0 {
					b[rng.IntN(len(b))] = alphabet[rng.IntN(len(alphabet))]
				}
			}
		}
		st, body := do(t, srv, "POST", paths[i%len(paths)], string(b))
		if st >= 500 {
			t.Fatalf("POST %s %q: %d %s", paths[i%len(paths)], b, st, body)
		}
	}
}

var quiet = slog.New(slog.DiscardHandler)

// TestCachedFailedAnswerMatchesPartition: a FAILED compat reservation is
// answered from the API's cache right after the POST; a fresh API over the
// same engine (empty cache) must answer byte for byte the same.
func TestCachedFailedAnswerMatchesPartition(t *testing.T) {
	eng := newEngine(t, 4)
	first, second := serveAPI(t, eng), serveAPI(t, eng)
	do(t, first, "POST", "/v1/event", event)
	for _, body := range []string{
		`{"userId":"u\"1","eventId":"ev","areaId":"A","numOfSeats":9,"type":"RANDOM"}`,
		`{"userId":"u","eventId":"ev","areaId":"nope","numOfSeats":1,"type":"RANDOM"}`,
		`{"userId":"u","eventId":"ev","areaId":"A","numOfSeats":1,"type":"BEST"}`,
	} {
		_, id := do(t, first, "POST", "/v1/event/ev/reservation", body)
		st1, cached := do(t, first, "GET", "/v1/reservation/"+id, "")
		st2, fromPartition := do(t, second, "GET", "/v1/reservation/"+id, "")
		if st1 != 200 || st2 != 200 || cached != fromPartition || !strings.Contains(cached, "FAILED") {
			t.Fatalf("%s:\ncached    %d %s\npartition %d %s", body, st1, cached, st2, fromPartition)
		}
	}
}
