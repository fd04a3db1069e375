package ticketing_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

type eventsPage struct {
	Events []struct {
		EventName   string
		Areas       int
		Seats       int
		Sold        int
		Available   int
		SellThrough float64
	}
	Next string
}

// The events list pages by name with a cursor and counts sold seats over
// every area's partition; an area's seat map shows exactly the sold seats.
func TestOperatorEventsAndSeatMap(t *testing.T) {
	srv := newServer(t)
	for i := range 25 {
		body := fmt.Sprintf(`{"eventName":"e%02d","artist":"a","areas":[{"areaId":"A","price":1,"rowCount":3,"colCount":5},{"areaId":"B","price":1,"rowCount":1,"colCount":5}]}`, i)
		if st, b := do(t, srv, "POST", "/v1/event", body); st != 200 {
			t.Fatalf("create: %d %s", st, b)
		}
	}
	for _, seat := range [][2]int{{0, 0}, {1, 4}, {2, 2}} {
		body := fmt.Sprintf(`{"eventId":"e03","areaId":"A","userId":"u","type":"SELF_PICK","seats":[{"row":%d,"col":%d}]}`, seat[0], seat[1])
		if st, b := do(t, srv, "POST", "/v2/reservations", body); st != 201 {
			t.Fatalf("reserve: %d %s", st, b)
		}
	}
	if st, b := do(t, srv, "POST", "/v2/reservations", `{"eventId":"e03","areaId":"B","userId":"u","type":"RANDOM","numOfSeats":5}`); st != 201 {
		t.Fatalf("reserve B: %d %s", st, b)
	}

	var names []string
	after := ""
	for pages := 0; ; pages++ {
		var p eventsPage
		st, b := do(t, srv, "GET", "/v2/events?limit=10&after="+after, "")
		if st != 200 || json.Unmarshal([]byte(b), &p) != nil {
			t.Fatalf("page %d: %d %s", pages, st, b)
		}
		for _, e := range p.Events {
			names = append(names, e.EventName)
			want := 0
			if e.EventName == "e03" {
				want = 8
			}
			if e.Areas != 2 || e.Seats != 20 || e.Sold != want || e.Available != 20-want || e.SellThrough != float64(want)/20 {
				t.Errorf("%s: %+v, want 20 seats, %d sold", e.EventName, e, want)
			}
		}
		if p.Next == "" {
			if pages != 2 || len(p.Events) != 5 {
				t.Errorf("last page %d holds %d events, want page 2 with 5", pages, len(p.Events))
			}
			break
		}
		if len(p.Events) != 10 || p.Next != p.Events[9].EventName {
			t.Fatalf("page %d: %d events, next %q", pages, len(p.Events), p.Next)
		}
		after = p.Next
	}
	if len(names) != 25 || names[0] != "e00" || names[24] != "e24" {
		t.Errorf("paged through %v", names)
	}

	st, b := do(t, srv, "GET", "/v2/events/e03/areas/A/seats", "")
	var sm struct {
		RowCount, ColCount, Seats, Sold, Available int
		Encoding, Bitmap                           string
	}
	if st != 200 || json.Unmarshal([]byte(b), &sm) != nil {
		t.Fatalf("seat map: %d %s", st, b)
	}
	bits, err := base64.StdEncoding.DecodeString(sm.Bitmap)
	if err != nil || len(bits) != 2 || sm.Seats != 15 || sm.Sold != 3 || sm.Available != 12 || sm.Encoding != "bitmap-base64" {
		t.Fatalf("seat map %+v (%v)", sm, err)
	}
	var sold []string
	for i := range 15 {
		if bits[i/8]&(1<<(i%8)) != 0 {
			sold = append(sold, fmt.Sprintf("%d,%d", i/5, i%5))
		}
	}
	if got := strings.Join(sold, " "); got != "0,0 1,4 2,2" {
		t.Errorf("sold seats %s, want 0,0 1,4 2,2", got)
	}
	if st, b := do(t, srv, "GET", "/v2/events/e04/areas/A/seats", ""); st != 200 || !strings.Contains(b, `"bitmap":"AAA="`) {
		t.Errorf("untouched area: %d %s", st, b)
	}

	for _, c := range []struct {
		path string
		st   int
		msg  string
	}{
		{"/v2/events?limit=0", 400, "limit must be a whole number from 1 to 100"},
		{"/v2/events?limit=101", 400, "from 1 to 100"},
		{"/v2/events?after=" + strings.Repeat("x", 257), 400, "at most 256 bytes"},
		{"/v2/events/e03/areas/Z/seats", 404, `no area \"Z\"`},
		{"/v2/events/nope/areas/A/seats", 404, "no area"},
	} {
		if st, b := do(t, srv, "GET", c.path, ""); st != c.st || !strings.Contains(b, c.msg) {
			t.Errorf("%s: %d %s, want %d %s", c.path, st, b, c.st, c.msg)
		}
	}
	if st, b := do(t, srv, "GET", "/v2/events?after=e24", ""); st != 200 || strings.TrimSpace(b) != `{"events":[]}` {
		t.Errorf("past the end: %d %s", st, b)
	}
}
