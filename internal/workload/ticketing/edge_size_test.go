package ticketing_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/surge-run/surge/internal/api/apitest"
	"github.com/surge-run/surge/internal/cmdlog"
	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/engine/enginetest"
	"github.com/surge-run/surge/internal/workload/ticketing"
)

// Every route that logs a command, given the largest request its limits
// allow, makes log entries (command and envelope, as the log receives
// them) within cmdlog.MaxEntryBytes: a legal request never makes an entry
// the log refuses.
func TestEveryRouteCommandFitsALogEntry(t *testing.T) {
	dir := t.TempDir()
	el := &apitest.EntryLog{Log: enginetest.OpenWAL(t, dir, 4)}
	eng := enginetest.OpenEngine(t, dir, engine.Options{Partitions: 4, Log: el}, ticketing.Workload{})
	srv := serveAPI(t, eng)
	check := func(route string, want int, st int, body string) {
		t.Helper()
		if st != want {
			t.Fatalf("%s: the worst legal request got %d %.300s, want %d", route, st, body, want)
		}
		n := el.TakeMax()
		if n == 0 || n > cmdlog.MaxEntryBytes {
			t.Fatalf("%s: largest log entry %d bytes, want 1 to %d", route, n, cmdlog.MaxEntryBytes)
		}
		t.Logf("%s: largest entry %d bytes", route, n)
	}

	// The largest event: the longest names, the most areas with the
	// longest ids, and the times' fractions filling the body to its limit.
	name := apitest.Longest(ticketing.MaxNameLen)
	def := ticketing.EventDef{EventName: name, Artist: name}
	for i := range ticketing.MaxAreasPerEvent {
		id := fmt.Sprintf("%04d", i) + apitest.Longest(ticketing.MaxNameLen-4)
		def.Areas = append(def.Areas, ticketing.AreaDef{AreaID: id, Price: 1e15, RowCount: 1, ColCount: 1})
	}
	def.Areas[0].RowCount, def.Areas[0].ColCount = 10, 10 // room for the largest reservation
	b, _ := json.Marshal(&def)
	fill := (1<<20 - len(b) - 4*len(`,"reservationOpeningTime":"2026-01-02T15:04:05.Z"`)) / 4
	tm := "2026-01-02T15:04:05." + strings.Repeat("0", fill) + "Z"
	def.ReservationOpeningTime, def.ReservationClosingTime, def.EventStartTime, def.EventEndTime = tm, tm, tm, tm
	b, _ = json.Marshal(&def)
	if len(b) > 1<<20 || len(b) < 1<<20-100 {
		t.Fatalf("the event body is %d bytes, want just under 1 MiB", len(b))
	}
	st, body := do(t, srv, "POST", "/v1/event", string(b), "Content-Type", "application/json")
	check("POST /v1/event", http.StatusOK, st, body)

	// The largest reservations: the longest ids, 100 seats, the longest
	// type (a compat FAILED record keeps it) and Idempotency-Key.
	seats := make([]ticketing.Seat, ticketing.MaxSeatsPerRequest)
	for i := range seats {
		seats[i] = ticketing.Seat{Row: 1 << 30, Col: 1 << 30}
	}
	res := map[string]any{"userId": name, "eventId": name, "areaId": def.Areas[0].AreaID, "numOfSeats": 100, "seats": seats, "type": apitest.Longest(ticketing.MaxNameLen)}
	rb, _ := json.Marshal(res)
	st, body = do(t, srv, "POST", "/v1/event/x/reservation", string(rb), "Content-Type", "application/json")
	check("POST /v1/event/{id}/reservation", http.StatusOK, st, body)
	for i := range seats {
		seats[i] = ticketing.Seat{Row: int32(i / 10), Col: int32(i % 10)}
	}
	res["type"], res["seats"] = ticketing.TypeSelfPick, seats
	rb, _ = json.Marshal(res)
	st, body = do(t, srv, "POST", "/v2/reservations", string(rb), "Content-Type", "application/json", "Idempotency-Key", strings.Repeat("k", 255))
	check("POST /v2/reservations", http.StatusCreated, st, body)
	var r struct{ ReservationID string }
	_ = json.Unmarshal([]byte(body), &r)
	st, body = do(t, srv, "DELETE", "/v2/reservations/"+r.ReservationID, "")
	check("DELETE /v2/reservations/{id}", http.StatusOK, st, body)
}
