package ticketing

// Native fuzz tests of every parser on the edge. Their seeds run as plain
// tests in `make test`; to search further, e.g.
//
//	go test ./internal/workload/ticketing -run '^$' -fuzz '^FuzzParseReserve$' -fuzztime 5m
//
// Each checks a property against an independent statement of the rule,
// not only that nothing panics.

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/engine/enginetest"
	"github.com/surge-run/surge/internal/ids"
)

var canonicalID = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

func FuzzParseID(f *testing.F) {
	for _, s := range []string{
		"6b00cec0-e876-43d6-a5e8-e7a2325600ff",
		"6B00CEC0-E876-43D6-A5E8-E7A2325600FF",
		"00000000-0000-0000-0000--00000000000", // the panic of issue 6
		"00000000-0000-0000-0000-00000000000-",
		"-0000000-0000-0000-0000-000000000000",
		"00000000-0000-0000-0000-00000000000g",
		"00000000000000000000000000000000----",
		"", "-", strings.Repeat("-", 36), strings.Repeat("a", 36),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, ok := ids.Parse(s)
		if ok != canonicalID.MatchString(s) {
			t.Fatalf("ids.Parse(%q) ok=%v, but the canonical form says %v", s, ok, !ok)
		}
		if ok && id != ([16]byte{}) && string(formatID(nil, id)) != strings.ToLower(s) {
			t.Fatalf("ids.Parse(%q) = %x, which formats as %s", s, id, formatID(nil, id))
		}
		// Round trip from the other side: any 16 bytes.
		var want [16]byte
		copy(want[:], s)
		if want == ([16]byte{}) {
			return
		}
		got, ok := ids.Parse(string(formatID(nil, want)))
		if !ok || got != want {
			t.Fatalf("%x formats as %s, which parses as %x, %v", want, formatID(nil, want), got, ok)
		}
	})
}

// allStrings returns every key and string value of a JSON document as
// encoding/json decodes them, duplicates included (decoding into a map
// would keep only the last of a duplicated key).
func allStrings(b []byte) ([]string, bool) {
	var out []string
	dec := json.NewDecoder(bytes.NewReader(b))
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return out, true
		}
		if err != nil {
			return nil, false
		}
		if s, ok := tok.(string); ok {
			out = append(out, s)
		}
	}
}

func hasControl(s string) bool {
	return strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f })
}

// FuzzParseReserve: whatever the fast path accepts, encoding/json accepts
// with the same values and the string rule passes; and the raw string
// check agrees with what encoding/json decodes: it passes only bodies
// whose strings are free of control characters, and refuses only bodies
// where encoding/json would produce a control character or a U+FFFD
// (the mark of invalid UTF-8 or a lone surrogate).
func FuzzParseReserve(f *testing.F) {
	for _, s := range []string{
		`{"userId":"user123","eventId":"event-1","areaId":"17","numOfSeats":3,"type":"RANDOM"}`,
		` { "userId" : "u", "eventId":"e","areaId":"a","seats":[{"row":1,"col":2},{"col":-3,"row":0}],"type":"SELF_PICK","numOfSeats":null } `,
		`{"seats":[],"numOfSeats":-0,"type":null}`,
		`{}`,
		`{"userId":"a` + "\x7f" + `b","eventId":"e","areaId":"a"}`,
		`{"userId":"a` + "\xff" + `b"}`,
		`{"userId":"a\u0001b","USERID":"x"}`,
		`{"userId":"\ud83c\udfab","eventId":"\ud800","areaId":"\udc00\ud800"}`,
		`{"userId":"é\n","x":["\t",{"y":"\u007f"}]}`,
		`{"userId":"u","userId":"v","numOfSeats":99999999999999999999}`,
		`{"seats":[[[[[[[[[[{}]]]]]]]]]]}`,
		`{"a` + "\xc0\xaf" + `":1}`,
		`"\`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		problem := checkStrings(b) // must not panic on any input
		var fast reserveBody
		if parseReserveFast(b, &fast) {
			var std reserveBody
			if msg := decodeJSON(b, &std); msg != "" {
				t.Fatalf("fast path accepted %q, the slow path says %s", b, msg)
			}
			if len(fast.Seats) == 0 && len(std.Seats) == 0 {
				fast.Seats, std.Seats = nil, nil
			}
			if !reflect.DeepEqual(fast, std) {
				t.Fatalf("%q: fast %+v, encoding/json %+v", b, fast, std)
			}
			for _, s := range []string{fast.UserID, fast.EventID, fast.AreaID, fast.Type} {
				if checkText(s) != "" {
					t.Fatalf("fast path accepted %q with field %q", b, s)
				}
			}
		}
		if !json.Valid(b) {
			return
		}
		strs, ok := allStrings(b)
		if !ok {
			t.Fatalf("%q is valid JSON but its tokens do not decode", b)
		}
		control, fffd := false, false
		for _, s := range strs {
			control = control || hasControl(s)
			fffd = fffd || strings.ContainsRune(s, utf8.RuneError)
		}
		switch {
		case problem == "" && control:
			t.Fatalf("%q decodes to a control character, but checkStrings passed it", b)
		case problem != "" && !control && !fffd:
			t.Fatalf("%q decodes to clean text, but checkStrings says %s", b, problem)
		case problem != "" && (len(problem) > 300 || !utf8.ValidString(problem)):
			t.Fatalf("message for %q is not short, valid text: %q", b, problem)
		}
	})
}

// FuzzEventBody: what the event route accepts is a valid event by every
// rule stated independently here; what it refuses comes with a short
// message, however large the input.
func FuzzEventBody(f *testing.F) {
	for _, s := range []string{
		`{"eventName":"ev","artist":"a","areas":[{"areaId":"A","price":10,"rowCount":2,"colCount":3}]}`,
		`{"eventName":"ev","areas":[{"areaId":"A","rowCount":2,"colCount":3},{"areaId":"A","rowCount":2,"colCount":3}]}`,
		`{"eventName":"ev","eventStartTime":"2026-01-02T15:04:05Z","areas":[{"areaId":"A","rowCount":1000,"colCount":100}]}`,
		`{"eventName":"ev","eventStartTime":"tomorrow","areas":[{"areaId":"A","rowCount":1,"colCount":1}]}`,
		`{"eventName":"e\u0000","areas":[{"areaId":"A","rowCount":1,"colCount":1}]}`,
		`{"eventName":"e","areas":[{"areaId":"A","rowCount":1e3,"colCount":1,"price":-0}]}`,
		`{"eventName":"e","areas":[{"areaId":"A","rowCount":1,"colCount":1,"price":1e400}]}`,
		`{"eventName":"` + strings.Repeat("n", 300) + `","areas":[]}`,
		`{"eventName":"e","EVENTNAME":"f","areas":null}`,
		`[]`, `null`, `{"areas":[[]]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var def EventDef
		msg := decodeJSON(b, &def)
		if msg == "" {
			msg = validateEvent(&def)
		}
		if msg != "" {
			if len(msg) > 700 || !utf8.ValidString(msg) {
				t.Fatalf("message for %d-byte input is %d bytes: %.200q", len(b), len(msg), msg)
			}
			return
		}
		names := []string{def.EventName, def.Artist}
		if def.EventName == "" || len(def.EventName) > MaxNameLen || len(def.Artist) > MaxNameLen {
			t.Fatalf("accepted event name %q artist %q", def.EventName, def.Artist)
		}
		if len(def.Areas) < 1 || len(def.Areas) > MaxAreasPerEvent {
			t.Fatalf("accepted %d areas", len(def.Areas))
		}
		seen := map[string]bool{}
		for _, a := range def.Areas {
			names = append(names, a.AreaID)
			if a.AreaID == "" || len(a.AreaID) > MaxNameLen || seen[a.AreaID] ||
				a.RowCount < 1 || a.RowCount > MaxRows || a.ColCount < 1 || a.ColCount > MaxCols ||
				a.RowCount*a.ColCount > MaxSeatsPerArea || !(a.Price >= 0) {
				t.Fatalf("accepted area %+v", a)
			}
			seen[a.AreaID] = true
		}
		for _, n := range names {
			// U+FFFD in a name is only right if the client sent one.
			sentFFFD := strings.Contains(string(b), "\uFFFD") || strings.Contains(strings.ToLower(string(b)), `\ufffd`)
			if checkText(n) != "" || strings.ContainsRune(n, utf8.RuneError) && !sentFFFD {
				t.Fatalf("accepted name %q from %q", n, b)
			}
		}
		for _, ts := range []string{def.ReservationOpeningTime, def.ReservationClosingTime, def.EventStartTime, def.EventEndTime} {
			if _, err := time.Parse(time.RFC3339Nano, ts); ts != "" && err != nil {
				t.Fatalf("accepted time %q", ts)
			}
		}
	})
}

// FuzzIdempotencyKey: a key is accepted exactly when it is 1 to 255
// printable ASCII characters, kept byte for byte, and a refusal never
// repeats the key.
func FuzzIdempotencyKey(f *testing.F) {
	for _, s := range []string{"", "abc", "3f1c9a52-8d4e-4b7a-9c21-5e6f7a8b0003", "k\xffey", "kéy", "a\x00", "a\x7f", " ~", strings.Repeat("k", 255), strings.Repeat("k", 256)} {
		f.Add(s, false)
	}
	f.Add("a", true)
	f.Fuzz(func(t *testing.T, s string, twice bool) {
		vals := []string{s}
		if twice {
			vals = append(vals, s)
		}
		key, problem := idempotencyKey(vals)
		printable := len(s) <= maxIdemKeyLen && !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r > 0x7e })
		switch {
		case twice && problem == "":
			t.Fatalf("two Idempotency-Key headers accepted")
		case !twice && (problem == "") != printable:
			t.Fatalf("key %q: problem %q, printable %v", s, problem, printable)
		case problem == "" && key != s:
			t.Fatalf("key %q came back as %q", s, key)
		case problem != "" && (key != "" || len(problem) > 120 || len(s) > 8 && strings.Contains(problem, s)):
			t.Fatalf("refusal of %q: key %q, message %q", s, key, problem)
		}
	})
}

// FuzzPathValues sends any text as the path value of every route that
// takes one, through the real mux and handlers over an engine on the real
// log. Answers are 200, 400 or 404 with a short JSON error; the event in
// a compatibility reservation's path is stored exactly, or refused if it
// is not clean text.
func FuzzPathValues(f *testing.F) {
	for _, s := range []string{
		"ev", "nope", "00000000-0000-0000-0000--00000000000", "6b00cec0-e876-43d6-a5e8-e7a2325600ff",
		"a/b", "%2F", "e\x00v", "e\xffv", "é", strings.Repeat("x", 5000), "..", ".", " ",
	} {
		f.Add(s)
	}
	eng := enginetest.OpenEngine(f, f.TempDir(), engine.Options{Partitions: 4}, Workload{})
	mux := http.NewServeMux()
	NewAPI(eng).Register(mux, nil)
	serve := func(t testing.TB, method, path, body string) (int, string) {
		t.Helper()
		r := httptest.NewRequest(method, path, strings.NewReader(body))
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		out := w.Body.String()
		if w.Code >= 400 {
			var e struct{ Error string }
			if w.Code >= 500 || w.Header().Get("Content-Type") != "application/json" || json.Unmarshal([]byte(out), &e) != nil || e.Error == "" || len(out) > 1024 {
				t.Fatalf("%s %.100s: %d %.300s", method, path, w.Code, out)
			}
		}
		return w.Code, out
	}
	if st, out := serve(f, "POST", "/v1/event", `{"eventName":"ev","areas":[{"areaId":"A","rowCount":10,"colCount":10}]}`); st != 200 {
		f.Fatalf("create: %d %s", st, out)
	}
	f.Fuzz(func(t *testing.T, s string) {
		seg := url.PathEscape(s)
		for _, p := range []string{"/v2/reservations/", "/v1/reservation/"} {
			if st, out := serve(t, "GET", p+seg, ""); st != 404 && st != 301 && st != 307 {
				t.Fatalf("GET %s%q: %d %s (no reservation exists)", p, s, st, out)
			}
		}
		if st, out := serve(t, "DELETE", "/v2/reservations/"+seg, ""); st != 404 && st != 301 && st != 307 {
			t.Fatalf("DELETE %q: %d %s", s, st, out)
		}
		if st, out := serve(t, "GET", "/v2/events/"+seg, ""); (st == 200) != (s == "ev") {
			t.Fatalf("GET event %q: %d %.200s", s, st, out)
		}
		st, out := serve(t, "POST", "/v1/event/"+seg+"/reservation", `{"areaId":"B","numOfSeats":1,"type":"RANDOM"}`)
		clean := s != "" && len(s) <= MaxNameLen && checkText(s) == ""
		if st != 200 {
			if st != 400 && st != 404 && st != 301 && st != 307 || clean && st == 400 {
				t.Fatalf("POST reservation for event %q: %d %s", s, st, out)
			}
			return
		}
		if !clean {
			t.Fatalf("POST reservation for event %q was recorded: %s", s, out)
		}
		st, got := serve(t, "GET", "/v1/reservation/"+out, "")
		var res struct{ EventID, State string }
		if st != 200 || json.Unmarshal([]byte(got), &res) != nil || res.EventID != s || res.State != "FAILED" {
			t.Fatalf("reservation for event %q reads back as %d %s", s, st, got)
		}
	})
}
