package server

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The HTTP fuzz test runs in `make test` with a few thousand requests; a
// longer run, e.g.
//
//	go test ./internal/server -run TestHTTPFuzz -httpfuzz.n=200000 -httpfuzz.seed=7 -timeout 2h
var (
	httpFuzzN    = flag.Int("httpfuzz.n", 2500, "requests TestHTTPFuzz sends")
	httpFuzzSeed = flag.Uint64("httpfuzz.seed", 1, "seed of TestHTTPFuzz's request generator")
)

// TestHTTPFuzz runs the real server (server.Run: the engine over the real
// log in a temporary directory, the real mux, handlers and HTTP limits)
// and sends it mutated requests over every route: methods, paths, ids,
// headers (Content-Type, Idempotency-Key, Expect, chunked bodies) and
// bodies (byte flips, truncation, huge numbers, wrong types, invalid
// UTF-8, control characters, duplicate keys, deep nesting, oversize).
//
// It keeps a model of what the server must hold, changed only by 2xx
// answers, and checks: no answer is a 5xx; every 4xx is a JSON
// {"error": "..."}; /healthz stays 200; and, every few dozen requests and
// at the end, for every area of every event, available + reserved =
// capacity and the reserved seats are exactly those of the reservations
// that were answered 2xx and not cancelled. So a refused request that
// changed anything fails the test.
func TestHTTPFuzz(t *testing.T) {
	base := serveForTest(t, Config{Partitions: 4})

	f := &fuzzer{
		t:    t,
		base: base,
		rng:  rand.New(rand.NewPCG(*httpFuzzSeed, 0x5eed)),
		client: &http.Client{
			Timeout: 30 * time.Second,
			// A cleaned path is redirected; the redirect is the answer.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
			Transport:     &http.Transport{ExpectContinueTimeout: 5 * time.Second, MaxIdleConnsPerHost: 4},
		},
		events: map[string]*fzEvent{},
		res:    map[string]*fzRes{},
	}
	f.createEvent(`{"eventName":"fz","artist":"a","areas":[{"areaId":"A","price":1,"rowCount":4,"colCount":5},{"areaId":"B","price":2,"rowCount":2,"colCount":3},{"areaId":"C","price":3,"rowCount":1,"colCount":1}]}`)
	counts := map[int]int{}
	for i := range *httpFuzzN {
		counts[f.one()]++
		if i%40 == 39 {
			f.checkState()
		}
		if i%200 == 199 {
			f.checkHealth()
		}
		if t.Failed() {
			t.FailNow()
		}
	}
	f.checkHealth()
	f.checkState()
	f.checkReservations()
	t.Logf("statuses: %v; %d events, %d reservations in the model", counts, len(f.events), len(f.res))
	// The generator must reach the interesting outcomes, or it tests little.
	if *httpFuzzN >= 1000 && (counts[201] == 0 || counts[400] == 0 || counts[404] == 0 || counts[415] == 0 || counts[413] == 0) {
		t.Errorf("the generator missed an outcome: %v", counts)
	}
}

type fzEvent struct {
	areas map[string]*fzArea
}

type fzArea struct {
	rows, cols int
	taken      map[[2]int]string // seat -> reservation id
}

type fzRes struct {
	event, area, state string
	seats              [][2]int
}

type fuzzer struct {
	t      *testing.T
	base   string
	rng    *rand.Rand
	client *http.Client
	events map[string]*fzEvent
	res    map[string]*fzRes
	ids    []string
}

type fzReservation struct {
	ReservationID string `json:"reservationId"`
	EventID       string `json:"eventId"`
	AreaID        string `json:"areaId"`
	Seats         []struct{ Row, Col int }
	State         string `json:"state"`
}

type fzReq struct {
	method, path string // path already escaped
	body         []byte
	hdr          http.Header
	chunked      bool
}

func (f *fuzzer) pick(xs ...string) string { return xs[f.rng.IntN(len(xs))] }

// send sends r and checks the rules every answer obeys.
func (f *fuzzer) send(r fzReq) (int, http.Header, []byte) {
	f.t.Helper()
	var body io.Reader
	if r.body != nil {
		body = bytes.NewReader(r.body)
		if r.chunked {
			body = io.MultiReader(body) // hides the length: sent chunked
		}
	}
	req, err := http.NewRequest(r.method, f.base+r.path, body)
	if err != nil {
		return 0, nil, nil // not a request a client can send
	}
	for k, v := range r.hdr {
		req.Header[k] = v
	}
	resp, err := f.client.Do(req)
	if err != nil {
		if strings.Contains(err.Error(), "invalid header field") || strings.Contains(err.Error(), "invalid method") {
			return 0, nil, nil // refused by the client before sending
		}
		f.t.Fatalf("%s %.120s: %v (no answer)", r.method, r.path, err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		f.t.Fatalf("%s %.120s: reading the answer: %v", r.method, r.path, err)
	}
	st := resp.StatusCode
	switch {
	case st >= 500:
		f.t.Fatalf("%s %.120s %q %.300q: %d %s", r.method, r.path, r.hdr, r.body, st, b)
	case st >= 400:
		var e struct {
			Error *string `json:"error"`
			// The native reservation's 409 is the FAILED reservation
			// itself, whose failedReason is the message (docs/API.md).
			State        string `json:"state"`
			FailedReason string `json:"failedReason"`
		}
		if st == http.StatusConflict && f.route(r) == "POST /v2/reservations" && json.Unmarshal(b, &e) == nil && e.State == "FAILED" && e.FailedReason != "" {
			return st, resp.Header, b
		}
		if r.method != http.MethodHead && (resp.Header.Get("Content-Type") != "application/json" || json.Unmarshal(b, &e) != nil || e.Error == nil || *e.Error == "") {
			f.t.Fatalf("%s %.120s %.300q: %d %q %s is not a JSON error", r.method, r.path, r.body, st, resp.Header.Get("Content-Type"), b)
		}
		if len(b) > 2048 {
			f.t.Fatalf("%s %.120s: %d-byte error answer %.200s", r.method, r.path, len(b), b)
		}
	}
	return st, resp.Header, b
}

func (f *fuzzer) createEvent(body string) {
	f.t.Helper()
	st, _, b := f.send(fzReq{method: "POST", path: "/v1/event", body: []byte(body)})
	if st != 200 {
		f.t.Fatalf("create event: %d %s", st, b)
	}
	f.learnEvent(b)
}

// learnEvent adds an event echoed by a 200 to the model.
func (f *fuzzer) learnEvent(b []byte) {
	var def struct {
		EventName string
		Areas     []struct {
			AreaID             string
			RowCount, ColCount int
		}
	}
	if err := json.Unmarshal(b, &def); err != nil {
		f.t.Fatalf("event echo %s: %v", b, err)
	}
	if _, ok := f.events[def.EventName]; ok {
		return // created again with the same definition: a no-op
	}
	ev := &fzEvent{areas: map[string]*fzArea{}}
	for _, a := range def.Areas {
		ev.areas[a.AreaID] = &fzArea{rows: a.RowCount, cols: a.ColCount, taken: map[[2]int]string{}}
	}
	f.events[def.EventName] = ev
}

// learnReserved adds a reservation a 2xx answer reported.
func (f *fuzzer) learnReserved(r *fzReservation, replayed bool) {
	f.t.Helper()
	id := strings.ToLower(r.ReservationID)
	if old, ok := f.res[id]; ok || replayed {
		if !ok || old.state != r.State {
			f.t.Fatalf("replayed reservation %s is %s, the model has %+v", id, r.State, old)
		}
		return
	}
	m := &fzRes{event: r.EventID, area: r.AreaID, state: r.State}
	f.res[id] = m
	f.ids = append(f.ids, r.ReservationID)
	if r.State != "RESERVED" {
		return
	}
	ar := f.events[r.EventID].areaOrNil(r.AreaID)
	if ar == nil {
		f.t.Fatalf("reservation %s in unknown area %q/%q", id, r.EventID, r.AreaID)
	}
	for _, s := range r.Seats {
		seat := [2]int{s.Row, s.Col}
		if s.Row < 0 || s.Row >= ar.rows || s.Col < 0 || s.Col >= ar.cols {
			f.t.Fatalf("reservation %s got seat %v outside %dx%d", id, seat, ar.rows, ar.cols)
		}
		if other, taken := ar.taken[seat]; taken {
			f.t.Fatalf("seat %v of %s/%s given to %s and %s", seat, r.EventID, r.AreaID, other, id)
		}
		ar.taken[seat] = id
		m.seats = append(m.seats, seat)
	}
}

func (e *fzEvent) areaOrNil(a string) *fzArea {
	if e == nil {
		return nil
	}
	return e.areas[a]
}

func (f *fuzzer) checkHealth() {
	f.t.Helper()
	if st, _, b := f.send(fzReq{method: "GET", path: "/healthz"}); st != 200 {
		f.t.Fatalf("/healthz: %d %s", st, b)
	}
}

// checkState compares every area of every event with the model.
func (f *fuzzer) checkState() {
	f.t.Helper()
	for name, ev := range f.events {
		st, _, b := f.send(fzReq{method: "GET", path: "/v2/events/" + url.PathEscape(name)})
		var got struct {
			Areas []struct {
				AreaID                                            string
				RowCount, ColCount, AvailableSeats, ReservedSeats int
			}
		}
		if st != 200 || json.Unmarshal(b, &got) != nil || len(got.Areas) != len(ev.areas) {
			f.t.Fatalf("GET event %q: %d %.300s", name, st, b)
		}
		for _, a := range got.Areas {
			m := ev.areas[a.AreaID]
			if m == nil || a.AvailableSeats+a.ReservedSeats != m.rows*m.cols || a.ReservedSeats != len(m.taken) {
				f.t.Fatalf("event %q area %q: available %d + reserved %d, capacity %dx%d; the model has %d reserved",
					name, a.AreaID, a.AvailableSeats, a.ReservedSeats, a.RowCount, a.ColCount, len(m.taken))
			}
		}
	}
}

// checkReservations reads back every reservation in the model.
func (f *fuzzer) checkReservations() {
	f.t.Helper()
	for id, m := range f.res {
		st, _, b := f.send(fzReq{method: "GET", path: "/v2/reservations/" + id})
		var r fzReservation
		if st != 200 || json.Unmarshal(b, &r) != nil || r.State != m.state || len(r.Seats) != len(m.seats) {
			f.t.Fatalf("reservation %s: %d %s; the model has %+v", id, st, b, m)
		}
	}
}

// one generates, sends and checks one request, and returns its status.
func (f *fuzzer) one() int {
	f.t.Helper()
	r := f.generate()
	if f.rng.IntN(10) < 6 {
		f.mutate(&r)
	}
	st, hdr, b := f.send(r)
	if st < 200 || st >= 300 {
		return st
	}
	// Only what the server says it did enters the model; what the
	// request looked like does not matter.
	switch f.route(r) {
	case "POST /v1/event":
		f.learnEvent(b)
	case "POST /v2/reservations":
		var res fzReservation
		if err := json.Unmarshal(b, &res); err != nil {
			f.t.Fatalf("native reservation answer %s: %v", b, err)
		}
		f.learnReserved(&res, hdr.Get("Idempotent-Replayed") == "true")
	case "POST /v1/event/{id}/reservation":
		id := string(b)
		st2, _, b2 := f.send(fzReq{method: "GET", path: "/v1/reservation/" + url.PathEscape(id)})
		var res fzReservation
		if st2 != 200 || json.Unmarshal(b2, &res) != nil || res.ReservationID != id {
			f.t.Fatalf("compat reservation %q reads back as %d %s", id, st2, b2)
		}
		f.learnReserved(&res, false)
	case "DELETE /v2/reservations/{id}":
		var res fzReservation
		if err := json.Unmarshal(b, &res); err != nil {
			f.t.Fatalf("cancel answer %s: %v", b, err)
		}
		m := f.res[strings.ToLower(res.ReservationID)]
		if m == nil || res.State != "CANCELLED" || m.state == "FAILED" {
			f.t.Fatalf("cancel answered %s; the model has %+v", b, m)
		}
		if m.state == "RESERVED" {
			ar := f.events[m.event].areas[m.area]
			for _, s := range m.seats {
				delete(ar.taken, s)
			}
			m.state = "CANCELLED"
		}
	case "GET /v2/reservations/{id}", "GET /v1/reservation/{id}":
		var res fzReservation
		if err := json.Unmarshal(b, &res); err != nil {
			f.t.Fatalf("GET reservation answer %s: %v", b, err)
		}
		if m := f.res[strings.ToLower(res.ReservationID)]; m == nil || m.state != res.State {
			f.t.Fatalf("GET reservation answered %s; the model has %+v", b, m)
		}
	}
	return st
}

func (f *fuzzer) id() string {
	if len(f.ids) > 0 && f.rng.IntN(3) > 0 {
		id := f.ids[f.rng.IntN(len(f.ids))]
		if f.rng.IntN(4) == 0 {
			id = strings.ToUpper(id) // the same id
		}
		return id
	}
	return f.pick("00000000-0000-0000-0000--00000000000", "6b00cec0-e876-43d6-a5e8-e7a2325600ff",
		"6b00cec0-e876-43d6-a5e8-e7a232560001", "not-an-id", strings.Repeat("7", 1+f.rng.IntN(3000)))
}

func (f *fuzzer) reserveBody() string {
	area := f.pick("A", "A", "B", "C", "Z")
	user := "u" + strconv.Itoa(f.rng.IntN(4))
	if f.rng.IntN(2) == 0 {
		return fmt.Sprintf(`{"userId":%q,"eventId":"fz","areaId":%q,"numOfSeats":%d,"type":"RANDOM"}`, user, area, 1+f.rng.IntN(4))
	}
	var seats []string
	for range 1 + f.rng.IntN(3) {
		seats = append(seats, fmt.Sprintf(`{"row":%d,"col":%d}`, f.rng.IntN(5), f.rng.IntN(6)))
	}
	return fmt.Sprintf(`{"userId":%q,"eventId":"fz","areaId":%q,"seats":[%s],"type":"SELF_PICK"}`, user, area, strings.Join(seats, ","))
}

// route names the route a request is for, as the server's patterns do
// ("" for none), from the path the server will see.
func (f *fuzzer) route(r fzReq) string {
	u, err := url.Parse(f.base + r.path)
	if err != nil {
		return ""
	}
	segs := strings.Split(u.Path, "/")
	switch {
	case u.Path == "/v1/event" || u.Path == "/v2/reservations":
		return r.method + " " + u.Path
	case len(segs) == 5 && segs[1] == "v1" && segs[2] == "event" && segs[3] != "" && segs[4] == "reservation":
		return r.method + " /v1/event/{id}/reservation"
	case len(segs) == 4 && segs[3] != "" && (segs[1] == "v1" && segs[2] == "reservation" || segs[1] == "v2" && segs[2] == "reservations"):
		return r.method + " /" + segs[1] + "/" + segs[2] + "/{id}"
	}
	return ""
}

// generate makes a valid-looking request for a random route.
func (f *fuzzer) generate() fzReq {
	switch f.rng.IntN(9) {
	case 0, 1:
		r := fzReq{method: "POST", path: "/v2/reservations", body: []byte(f.reserveBody()), hdr: http.Header{}}
		if f.rng.IntN(2) == 0 {
			r.hdr.Set("Idempotency-Key", "k"+strconv.Itoa(f.rng.IntN(6)))
		}
		return r
	case 2, 3:
		return fzReq{method: "POST", path: "/v1/event/" + f.pick("fz", "other", "x") + "/reservation", body: []byte(f.reserveBody())}
	case 4:
		return fzReq{method: "GET", path: "/v2/reservations/" + url.PathEscape(f.id())}
	case 5:
		return fzReq{method: "GET", path: "/v1/reservation/" + url.PathEscape(f.id())}
	case 6:
		return fzReq{method: "DELETE", path: "/v2/reservations/" + url.PathEscape(f.id())}
	case 7:
		return fzReq{method: "GET", path: "/v2/events/" + url.PathEscape(f.pick("fz", "nope", "e"+strconv.Itoa(f.rng.IntN(5))))}
	default:
		body := fmt.Sprintf(`{"eventName":"e%d","artist":"a","areas":[{"areaId":"A","price":1,"rowCount":%d,"colCount":%d}],"eventStartTime":"2026-01-02T15:04:05Z"}`,
			f.rng.IntN(5), 1+f.rng.IntN(3), 1+f.rng.IntN(3))
		if f.rng.IntN(4) == 0 {
			body = `{"eventName":"fz","artist":"a","areas":[{"areaId":"A","price":1,"rowCount":4,"colCount":5}]}` // conflicts
		}
		return fzReq{method: "POST", path: "/v1/event", body: []byte(body)}
	}
}

var fzSnippets = []string{
	"\xff", "\xc0\xaf", "\xe2\x82", "\x00", "\x7f", "\x01", `\u0000`, `\u001f`, `\ud800`, `\udc00\ud800`, `\n`, "é", "🎫",
	`"`, `\`, `{`, `}`, `[`, `]`, `,`, `:`, "null", "true", "-", "0", "1e999", "99999999999999999999999", "-0.5",
	`"2"`, `[]`, `{}`, `["RANDOM"]`,
}

// mutate applies one to three random changes to r.
func (f *fuzzer) mutate(r *fzReq) {
	if r.hdr == nil {
		r.hdr = http.Header{}
	}
	for range 1 + f.rng.IntN(3) {
		b := r.body
		switch k := f.rng.IntN(16); k {
		case 0: // flip a byte
			if len(b) > 0 {
				b[f.rng.IntN(len(b))] ^= byte(1 << f.rng.IntN(8))
			}
		case 1: // truncate
			if len(b) > 0 {
				r.body = b[:f.rng.IntN(len(b))]
			}
		case 2, 3: // insert a snippet
			p := f.rng.IntN(len(b) + 1)
			r.body = slices.Insert(b, p, []byte(f.pick(fzSnippets...))...)
		case 4: // replace a string or number value with something else
			s := string(b)
			for _, key := range []string{`"numOfSeats":`, `"type":`, `"areaId":`, `"userId":`, `"eventId":`, `"row":`, `"rowCount":`, `"seats":`, `"eventName":`, `"eventStartTime":`} {
				if i := strings.Index(s, key); i >= 0 && f.rng.IntN(2) == 0 {
					j := i + len(key)
					end := j + strings.IndexAny(s[j:], ",}")
					if end < j {
						end = len(s)
					}
					s = s[:j] + f.pick(`"2"`, `1e400`, `-99999999999999999999`, `[]`, `{}`, `null`, `true`, `"`+strings.Repeat("x", 300)+`"`,
						`"\u0007"`, "\"\xff\"", `"a\ud800"`, `0.5`, `-1`, `2147483648`, `"RANDOM"`, `"SELF_PICK"`, `[{"row":1e9,"col":-1}]`) + s[end:]
					break
				}
			}
			r.body = []byte(s)
		case 5: // duplicate a key
			if i := bytes.LastIndexByte(b, '}'); i > 0 {
				r.body = slices.Insert(b, i, []byte(f.pick(`,"areaId":"B"`, `,"eventId":"nope"`, `,"numOfSeats":3`, `,"eventName":"fz"`, `,"AREAID":"C"`))...)
			}
		case 6: // deep nesting
			d := 1 + f.rng.IntN(20000)
			r.body = []byte(strings.Repeat("[", d) + strings.Repeat("]", d))
		case 7: // oversize
			r.body = append(b, bytes.Repeat([]byte(" "), 16<<10+f.rng.IntN(64))...)
			if f.rng.IntN(20) == 0 {
				r.body = append(r.body, bytes.Repeat([]byte(" "), 1<<20)...)
			}
		case 8: // Content-Type
			r.hdr.Set("Content-Type", f.pick("application/json", "APPLICATION/JSON; charset=utf-8", "application/problem+json",
				"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "", "application/jsonx", "json"))
		case 9: // Idempotency-Key
			r.hdr.Set("Idempotency-Key", f.pick("k1", "k2", strings.Repeat("k", 256), "k\xffy", "kéy", " k3 ", ""))
			if f.rng.IntN(4) == 0 {
				r.hdr.Add("Idempotency-Key", "k4")
			}
		case 10: // Expect: 100-continue, or a chunked body
			if f.rng.IntN(2) == 0 {
				r.hdr.Set("Expect", "100-continue")
			} else {
				r.chunked = true
			}
		case 11: // method
			r.method = f.pick("GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD", "TRACE", "BREW")
		case 12: // path: another segment
			segs := strings.Split(r.path, "/")
			i := 1 + f.rng.IntN(len(segs)-1)
			segs[i] = url.PathEscape(f.pick("", "..", ".", "v3", "reservation", "reservations", "event", "events", "fz", "\x00", "\xff", "é", f.id(), strings.Repeat("z", 5000)))
			r.path = strings.Join(segs, "/")
		case 13: // path: extra segments or slashes
			r.path += f.pick("/", "/x", "//", "/.", "?a=b", "%2F", "#frag")
		case 14: // body on a route that takes none, or none where one is needed
			if r.body == nil {
				r.body = []byte(f.reserveBody())
			} else {
				r.body = nil
			}
		case 15: // a random byte anywhere
			if len(b) > 0 {
				b[f.rng.IntN(len(b))] = byte(f.rng.IntN(256))
			}
		}
	}
}
