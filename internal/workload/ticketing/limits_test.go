package ticketing_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/engine/enginetest"
	"github.com/surge-run/surge/internal/workload/ticketing"
)

func serveLimited(t *testing.T, eng *engine.Engine, l ticketing.Limits) (*httptest.Server, ticketing.Usage) {
	t.Helper()
	a := ticketing.NewAPI(eng)
	used, err := a.SetLimits(context.Background(), l)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	a.Register(mux, api.NewMetrics(prometheus.NewRegistry()))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, used
}

// eventJSON declares an event of areas areas of rows x cols seats.
func eventJSON(name string, areas, rows, cols int) string {
	var b strings.Builder
	fmt.Fprintf(&b, `{"eventName":%q,"artist":"x","areas":[`, name)
	for i := range areas {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"areaId":"A%d","price":1,"rowCount":%d,"colCount":%d}`, i, rows, cols)
	}
	b.WriteString("]}")
	return b.String()
}

// TestLimitsRefuseEventsAndChangeNothing fills each limit and requires the
// event past it to get 409 naming the flag, with no event and no area of
// it created, while an identical retry of an existing event still gets 200.
func TestLimitsRefuseEventsAndChangeNothing(t *testing.T) {
	cases := []struct {
		name   string
		limits ticketing.Limits
		fits   []string // events that fit
		over   string   // the event past the limit
		flag   string
	}{
		{"events", ticketing.Limits{Events: 2}, []string{eventJSON("e1", 1, 1, 1), eventJSON("e2", 1, 1, 1)}, eventJSON("e3", 1, 1, 1), "--max-events"},
		{"areas", ticketing.Limits{Areas: 5}, []string{eventJSON("e1", 3, 1, 1), eventJSON("e2", 2, 1, 1)}, eventJSON("e3", 1, 1, 1), "--max-areas"},
		{"seats", ticketing.Limits{Seats: 100}, []string{eventJSON("e1", 2, 5, 5), eventJSON("e2", 1, 7, 7)}, eventJSON("e3", 1, 1, 2), "--max-seats"},
		{"one event past the limit", ticketing.Limits{Seats: 100}, nil, eventJSON("e3", 2, 10, 10), "--max-seats"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv, _ := serveLimited(t, newEngine(t, 4), c.limits)
			for _, ev := range c.fits {
				if st, body := do(t, srv, "POST", "/v1/event", ev); st != 200 {
					t.Fatalf("event within the limit: %d %s", st, body)
				}
			}
			st, body := do(t, srv, "POST", "/v1/event", c.over)
			if st != http.StatusConflict || !strings.Contains(body, c.flag) || !strings.HasPrefix(body, `{"error":`) {
				t.Fatalf("event past the limit: %d %s", st, body)
			}
			if st, body := do(t, srv, "GET", "/v2/events/e3", ""); st != 404 {
				t.Fatalf("the refused event exists: %d %s", st, body)
			}
			// No area of the refused event was created either.
			st, body = do(t, srv, "POST", "/v2/reservations", `{"userId":"u","eventId":"e3","areaId":"A0","type":"RANDOM","numOfSeats":1}`)
			if st != 404 {
				t.Fatalf("reserving in the refused event's area: %d %s", st, body)
			}
			for _, ev := range c.fits {
				if st, body := do(t, srv, "POST", "/v1/event", ev); st != 200 {
					t.Fatalf("retrying an existing event at the limit: %d %s", st, body)
				}
			}
			if len(c.fits) > 0 {
				changed := strings.Replace(c.fits[0], `"artist":"x"`, `"artist":"y"`, 1)
				if st, body := do(t, srv, "POST", "/v1/event", changed); st != http.StatusConflict || strings.Contains(body, c.flag) {
					t.Fatalf("a different definition of an existing event must be its own conflict: %d %s", st, body)
				}
			}
		})
	}
}

// TestLimitsCountWhatARestartedServerHolds: after a restart the limits
// count the events recovered from the log, not from zero.
func TestLimitsCountWhatARestartedServerHolds(t *testing.T) {
	dir := t.TempDir()
	eng := enginetest.OpenEngine(t, dir, engine.Options{Partitions: 4}, ticketing.Workload{})
	srv, used := serveLimited(t, eng, ticketing.Limits{Events: 3})
	if used != (ticketing.Usage{}) {
		t.Fatalf("fresh server holds %+v", used)
	}
	for _, ev := range []string{eventJSON("e1", 3, 2, 5), eventJSON("e2", 1, 1, 4)} {
		if st, body := do(t, srv, "POST", "/v1/event", ev); st != 200 {
			t.Fatalf("create: %d %s", st, body)
		}
	}
	srv.Close()
	if err := eng.Close(); err != nil {
		t.Fatal(err)
	}

	eng = enginetest.OpenEngine(t, dir, engine.Options{Partitions: 4}, ticketing.Workload{})
	t.Cleanup(func() { eng.Close() })
	srv, used = serveLimited(t, eng, ticketing.Limits{Events: 3})
	if want := (ticketing.Usage{Events: 2, Areas: 4, Seats: 34}); used != want {
		t.Fatalf("restarted server holds %+v, want %+v", used, want)
	}
	if st, body := do(t, srv, "POST", "/v1/event", eventJSON("e3", 1, 1, 1)); st != 200 {
		t.Fatalf("third event: %d %s", st, body)
	}
	if st, body := do(t, srv, "POST", "/v1/event", eventJSON("e4", 1, 1, 1)); st != http.StatusConflict || !strings.Contains(body, "--max-events") {
		t.Fatalf("fourth event: %d %s", st, body)
	}
}

// TestConcurrentCreatesRespectTheLimit: many clients creating events at
// once cannot pass the limit between a check and a creation.
func TestConcurrentCreatesRespectTheLimit(t *testing.T) {
	srv, _ := serveLimited(t, newEngine(t, 4), ticketing.Limits{Areas: 10})
	statuses := make(chan int, 30)
	for i := range 30 {
		go func() {
			req, _ := http.NewRequest("POST", srv.URL+"/v1/event", strings.NewReader(eventJSON(fmt.Sprint("e", i%15), 2, 1, 1)))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				statuses <- 0
				return
			}
			resp.Body.Close()
			statuses <- resp.StatusCode
		}()
	}
	created := map[int]int{}
	for range 30 {
		created[<-statuses]++
	}
	exist := 0
	for i := range 15 {
		if st, _ := do(t, srv, "GET", fmt.Sprint("/v2/events/e", i), ""); st == 200 {
			exist++
		}
	}
	if exist != 5 || created[200]+created[409] != 30 {
		t.Fatalf("%d events exist (want 5, 10 areas of 2); statuses %v", exist, created)
	}
}
