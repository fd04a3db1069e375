package ticketing

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/surge-run/surge/internal/engine"
)

// metricsScrapeTimeout bounds the queries one scrape makes of the
// partitions; a busy engine leaves these series out of that scrape.
const metricsScrapeTimeout = 2 * time.Second

// GetSeats asks a partition for its seats (SeatTotals).
type GetSeats struct{}

// SeatTotals are a partition's seats over all its areas.
type SeatTotals struct {
	Events, Areas, Seats, Taken int64
}

// seatTotals reads the areas' free counts, which reservations keep.
func (m *Machine) seatTotals() SeatTotals {
	t := SeatTotals{Events: int64(len(m.events)), Areas: int64(len(m.areas))}
	for _, a := range m.areas {
		n := int64(a.def.RowCount * a.def.ColCount)
		t.Seats += n
		t.Taken += n - int64(a.free)
	}
	return t
}

// SeatCollector exports the seats of every partition at each scrape: the
// sell-through is taken / (taken + free). Register it on the server's
// registry. In a cluster every node exports the whole cluster's.
func SeatCollector(eng *engine.Engine) prometheus.Collector { return seatCollector{eng} }

type seatCollector struct{ eng *engine.Engine }

var (
	seatsDesc = prometheus.NewDesc("surge_ticketing_seats",
		"Seats over all areas of all events: taken (reserved or sold) and free.", []string{"state"}, nil)
	eventsDesc = prometheus.NewDesc("surge_ticketing_events", "Events held (under --max-events).", nil, nil)
	areasDesc  = prometheus.NewDesc("surge_ticketing_areas", "Areas held over all events (under --max-areas).", nil, nil)
)

func (c seatCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- seatsDesc
	ch <- eventsDesc
	ch <- areasDesc
}

func (c seatCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), metricsScrapeTimeout)
	defer cancel()
	parts, err := engine.QueryAll[SeatTotals](ctx, c.eng, WorkloadID, GetSeats{})
	if err != nil {
		return // a busy or failed engine: the scrape goes on without these
	}
	var t SeatTotals
	for _, p := range parts {
		t.Events += p.Events
		t.Areas += p.Areas
		t.Seats += p.Seats
		t.Taken += p.Taken
	}
	gauge := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	gauge(seatsDesc, t.Taken, "taken")
	gauge(seatsDesc, t.Seats-t.Taken, "free")
	gauge(eventsDesc, t.Events)
	gauge(areasDesc, t.Areas)
}
