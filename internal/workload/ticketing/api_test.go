package ticketing_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/api/apitest"
	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/engine/enginetest"
	"github.com/surge-run/surge/internal/workload/ticketing"
)

// newEngine opens an engine with the ticketing workload on a fresh data
// directory, closed when the test ends.
func newEngine(t testing.TB, partitions int) *engine.Engine {
	return enginetest.APIEngine(t, engine.Options{Partitions: partitions}, ticketing.Workload{})
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

// TestMalformedIDIsNotFound: ids of the right length but the wrong shape
// (here an extra dash, which made parseID read past the end and panic)
// are ids that were never issued: 404 with a JSON error on every route
// that takes one, not a dropped connection.
func TestMalformedIDIsNotFound(t *testing.T) {
	srv := newServer(t)
	for _, id := range []string{
		"00000000-0000-0000-0000--00000000000",
		"00000000-0000-0000-0000-00000000000-",
		"00000000-0000-0000-0000-0000000000-0",
		"0000000--0000-0000-0000-000000000000",
	} {
		for _, rt := range []struct{ method, path string }{
			{"GET", "/v2/reservations/" + id},
			{"DELETE", "/v2/reservations/" + id},
			{"GET", "/v1/reservation/" + id},
		} {
			req, _ := http.NewRequest(rt.method, srv.URL+rt.path, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v (connection dropped)", rt.method, rt.path, err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var e struct{ Error string }
			if resp.StatusCode != 404 || json.Unmarshal(b, &e) != nil || e.Error == "" {
				t.Errorf("%s %s: %d %s, want 404 with a JSON error", rt.method, rt.path, resp.StatusCode, b)
			}
		}
	}
}

// TestOversizeBodyIsRefusedAtOnce: a declared Content-Length over the
// route's limit is answered 413 before any of the body is sent, with or
// without Expect: 100-continue (and then without "100 Continue"). The
// client here sends only the headers and waits, so a server that reads
// first would wait forever (httptest sets no read timeout).
func TestOversizeBodyIsRefusedAtOnce(t *testing.T) {
	srv := newServer(t)
	do(t, srv, "POST", "/v1/event", event)
	for _, c := range []struct {
		path   string
		length int
	}{
		{"/v1/event/ev/reservation", 1_000_000_000},
		{"/v1/event/ev/reservation", 20_000}, // small enough that net/http would try to drain it
		{"/v2/reservations", 16<<10 + 1},
		{"/v1/event", 1<<20 + 1},
	} {
		for _, expect := range []bool{false, true} {
			conn, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			// Closed also when the test fails, or the handler waiting for
			// the body would keep the server from closing.
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(5 * time.Second))
			req := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", c.path, c.length)
			if expect {
				req += "Expect: 100-continue\r\n"
			}
			if _, err := io.WriteString(conn, req+"\r\n"); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(conn)
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("%s with Content-Length %d (expect %v): no answer without the body: %v", c.path, c.length, expect, err)
			}
			if !strings.HasPrefix(line, "HTTP/1.1 413 ") {
				t.Fatalf("%s with Content-Length %d (expect %v): first line %q, want 413 (no 100 Continue)", c.path, c.length, expect, line)
			}
			resp, err := http.ReadResponse(bufio.NewReader(io.MultiReader(strings.NewReader(line), br)), nil)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			var e struct{ Error string }
			if json.Unmarshal(b, &e) != nil || !strings.Contains(e.Error, "larger than") || !resp.Close {
				t.Errorf("%s: 413 body %q (close %v), want a JSON error and the connection closed", c.path, b, resp.Close)
			}
		}
	}
	if got := available(t, srv); got != 6 {
		t.Fatalf("availability changed to %d", got)
	}
}

// TestErrorsEchoAShortPrefix: error messages quote at most a short prefix
// of what the client sent, so a huge id or name gets a small answer.
func TestErrorsEchoAShortPrefix(t *testing.T) {
	srv := newServer(t)
	do(t, srv, "POST", "/v1/event", event)
	big := strings.Repeat("7", 60<<10)
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/v2/reservations/" + big, ""},
		{"DELETE", "/v2/reservations/" + big, ""},
		{"GET", "/v1/reservation/" + big, ""},
		{"GET", "/v2/events/" + big, ""},
		{"GET", "/no/such/route/" + big, ""},
		{"POST", "/v2/reservations", `{"eventId":"ev","areaId":"A","numOfSeats":1,"type":"` + big[:15<<10] + `"}`},
		{"POST", "/v1/event/ev/reservation", `{"eventId":"ev","areaId":"A","numOfSeats":1,"type":"` + big[:15<<10] + `"}`},
		{"POST", "/v1/event/ev/reservation", `{"eventId":"ev","areaId":"A","numOfSeats":` + big[:15<<10] + `,"type":"RANDOM"}`},
		{"POST", "/v1/event", `{"eventName":"x","eventStartTime":"` + big + `","areas":[{"areaId":"A","rowCount":2,"colCount":3}]}`},
	} {
		st, body := do(t, srv, c.method, c.path, c.body)
		if st < 400 || st >= 500 || len(body) > 512 || !strings.Contains(body, "bytes)") {
			t.Errorf("%s %.40s %.40s: %d, %d-byte answer %.200s; want a 4xx that quotes a short prefix and the length", c.method, c.path, c.body, st, len(body), body)
		}
	}
	if got := available(t, srv); got != 6 {
		t.Fatalf("availability changed to %d", got)
	}
}

// TestTextFieldsMustBeCleanUTF8: invalid UTF-8 (which encoding/json would
// store as U+FFFD) and control characters in any string field are refused
// with a 400 that names the field, on both parsers, and change nothing;
// real non-ASCII text is kept as sent.
func TestTextFieldsMustBeCleanUTF8(t *testing.T) {
	srv := newServer(t)
	do(t, srv, "POST", "/v1/event", event)
	bad := map[string]string{
		"invalid UTF-8":     "a\xffb",
		"raw DEL":           "a\x7fb",
		"escaped control":   `a\u0001b`,
		"escaped newline":   `a\nb`,
		"escaped DEL":       `a\u007Fb`,
		"lone surrogate":    `a\ud800b`,
		"reversed pair":     `a\udc00\ud800b`,
		"truncated UTF-8":   "a\xe2\x82",
		"overlong encoding": "a\xc0\xafb",
	}
	res := map[string]string{"userId": "u", "eventId": "ev", "areaId": "A", "type": "RANDOM"}
	for name, v := range bad {
		for field := range res {
			var b strings.Builder
			b.WriteString(`{"numOfSeats":1`)
			for f, good := range res {
				if f == field {
					good = v
				}
				fmt.Fprintf(&b, `,%q:"%s"`, f, good)
			}
			b.WriteString("}")
			for _, path := range []string{"/v2/reservations", "/v1/event/ev/reservation"} {
				st, body := do(t, srv, "POST", path, b.String())
				if st != 400 || !strings.Contains(body, `field \"`+field+`\"`) {
					t.Errorf("%s in %s on %s: %d %s; want 400 naming the field", name, field, path, st, body)
				}
			}
		}
		for _, field := range []string{"eventName", "artist", "areaId"} {
			ev := map[string]string{"eventName": "e2", "artist": "a", "areaId": "A"}
			ev[field] = v
			body := fmt.Sprintf(`{"eventName":"%s","artist":"%s","areas":[{"areaId":"%s","price":1,"rowCount":1,"colCount":1}]}`, ev["eventName"], ev["artist"], ev["areaId"])
			st, resp := do(t, srv, "POST", "/v1/event", body)
			if st != 400 || !strings.Contains(resp, `field \"`+field+`\"`) {
				t.Errorf("%s in %s: %d %s; want 400 naming the field", name, field, st, resp)
			}
		}
	}
	if st, body := do(t, srv, "GET", "/v2/events/e2", ""); st != 404 {
		t.Errorf("a refused event was created: %d %s", st, body)
	}
	// The event in the path, used when the body has none, is held to the
	// same rule.
	if st, body := do(t, srv, "POST", "/v1/event/e%01v/reservation", `{"areaId":"A","numOfSeats":1,"type":"RANDOM"}`); st != 400 || !strings.Contains(body, "path") {
		t.Errorf("control character in the path's event id: %d %s", st, body)
	}
	if got := available(t, srv); got != 6 {
		t.Fatalf("refused requests changed availability to %d", got)
	}
	// Real text, raw or escaped, is accepted and kept exactly.
	for _, u := range []string{"Zoë", `Zo\u00eb`, `\ud83c\udfab`, "🎫"} {
		st, body := do(t, srv, "POST", "/v2/reservations", `{"userId":"`+u+`","eventId":"ev","areaId":"A","numOfSeats":1,"type":"RANDOM"}`)
		var r struct{ UserID string }
		json.Unmarshal([]byte(body), &r)
		var want string
		json.Unmarshal([]byte(`"`+u+`"`), &want)
		if st != 201 || r.UserID != want {
			t.Errorf("userId %s: %d %s", u, st, body)
		}
	}
}

// TestBodiesMustBeJSON: a POST body labelled as something other than JSON
// is refused with 415 saying what to send; JSON in any spelling, and no
// Content-Type at all, are accepted.
func TestBodiesMustBeJSON(t *testing.T) {
	srv := newServer(t)
	for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/xml"} {
		for _, c := range []struct{ path, body string }{
			{"/v1/event", strings.Replace(event, `"ev"`, `"ct"`, 1)},
			{"/v1/event/ev/reservation", `{"eventId":"ev","areaId":"A","numOfSeats":1,"type":"RANDOM"}`},
			{"/v2/reservations", `{"eventId":"ev","areaId":"A","numOfSeats":1,"type":"RANDOM"}`},
		} {
			st, body := do(t, srv, "POST", c.path, c.body, "Content-Type", ct)
			if st != 415 || !strings.Contains(body, "application/json") {
				t.Errorf("POST %s as %s: %d %s, want 415 saying to send application/json", c.path, ct, st, body)
			}
		}
	}
	if st, _ := do(t, srv, "GET", "/v2/events/ct", ""); st != 404 {
		t.Errorf("an event sent as text/plain was created")
	}
	if st, body := do(t, srv, "POST", "/v1/event", event, "Content-Type", "Application/JSON; charset=UTF-8"); st != 200 {
		t.Fatalf("create as Application/JSON; charset=UTF-8: %d %s", st, body)
	}
	for i, ct := range []string{"", "application/json", "application/json;charset=utf-8", "application/vnd.surge+json"} {
		hdr := []string{"Content-Type", ct}
		if ct == "" {
			hdr = nil
		}
		st, body := do(t, srv, "POST", "/v2/reservations", `{"eventId":"ev","areaId":"A","numOfSeats":1,"type":"RANDOM"}`, hdr...)
		if st != 201 {
			t.Errorf("reserve with Content-Type %q: %d %s", ct, st, body)
		}
		if got := available(t, srv); got != 6-(i+1) {
			t.Fatalf("available %d after %d reservations", got, i+1)
		}
	}
}

// TestIdempotencyKeyRules: the key is one header of printable ASCII.
func TestIdempotencyKeyRules(t *testing.T) {
	srv := newServer(t)
	do(t, srv, "POST", "/v1/event", event)
	body := `{"userId":"u","eventId":"ev","areaId":"A","numOfSeats":1,"type":"RANDOM"}`
	// Go's client refuses to send control bytes, so they are not tried here.
	for _, key := range []string{"k\xffey", "kéy"} {
		if st, resp := do(t, srv, "POST", "/v2/reservations", body, "Idempotency-Key", key); st != 400 || !strings.Contains(resp, "Idempotency-Key") {
			t.Errorf("key %q: %d %s", key, st, resp)
		}
	}
	req, _ := http.NewRequest("POST", srv.URL+"/v2/reservations", strings.NewReader(body))
	req.Header["Idempotency-Key"] = []string{"a", "b"}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(b), "one Idempotency-Key") {
		t.Errorf("two keys: %d %s", resp.StatusCode, b)
	}
	if got := available(t, srv); got != 6 {
		t.Fatalf("refused requests changed availability to %d", got)
	}
	if st, resp := do(t, srv, "POST", "/v2/reservations", body, "Idempotency-Key", "  3f1c-9a52 ~!"); st != 201 {
		t.Errorf("printable key: %d %s", st, resp)
	}
}

// Large answers take turns: an event of more than 100 areas and the
// event list wait for one, and without one within their patience are
// refused with a pause; a small event is answered whatever the turns.
func TestLargeAnswersTakeTurns(t *testing.T) {
	eng := newEngine(t, 4)
	mux := http.NewServeMux()
	a := ticketing.NewAPI(eng)
	a.Register(mux, api.NewMetrics(prometheus.NewRegistry()))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	areas := make([]string, 101)
	for i := range areas {
		areas[i] = fmt.Sprintf(`{"areaId":"A%d","rowCount":1,"colCount":1}`, i)
	}
	if st, b := do(t, srv, "POST", "/v1/event", `{"eventName":"big","areas":[`+strings.Join(areas, ",")+`]}`); st != 200 {
		t.Fatalf("create the large event: %d %s", st, b)
	}
	if st, b := do(t, srv, "POST", "/v1/event", event); st != 200 {
		t.Fatalf("create the small event: %d %s", st, b)
	}
	turns := a.SetLargeTurns(1, 20*time.Millisecond)
	turns.Take(context.Background())
	for _, path := range []string{"/v2/events/big", "/v2/events"} {
		apitest.WantBusy(t, srv.URL+path)
	}
	if st, b := do(t, srv, "GET", "/v2/events/ev", ""); st != 200 {
		t.Errorf("a small event with no turn free: %d %s", st, b)
	}
	turns.Give()
	for _, path := range []string{"/v2/events/big", "/v2/events"} {
		if st, b := do(t, srv, "GET", path, ""); st != 200 {
			t.Errorf("%s with a turn free: %d %.200s", path, st, b)
		}
	}
}
