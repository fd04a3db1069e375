package ticketing_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/surge-run/surge/internal/workload/ticketing"
)

// The seat gauges follow the areas: an event's seats are free until
// reserved, and a reservation takes them (the sell-through the
// ticketing dashboard draws).
func TestSeatCollector(t *testing.T) {
	eng := newEngine(t, 4)
	srv := serveAPI(t, eng)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(ticketing.SeatCollector(eng))
	if st, body := do(t, srv, "POST", "/v1/event", event); st != 200 {
		t.Fatalf("create: %d %s", st, body)
	}
	if st, body := do(t, srv, "POST", "/v1/event/ev/reservation", `{"eventId":"ev","areaId":"A","numOfSeats":2,"type":"RANDOM"}`); st/100 != 2 {
		t.Fatalf("reserve: %d %s", st, body)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				name += "/" + l.GetValue()
			}
			got[name] = m.GetGauge().GetValue()
		}
	}
	want := map[string]float64{"surge_ticketing_seats/free": 4, "surge_ticketing_seats/taken": 2, "surge_ticketing_events": 1, "surge_ticketing_areas": 1}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
}
