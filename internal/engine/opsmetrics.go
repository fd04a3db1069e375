package engine

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// The gauges and counters an operator's alerts need (deploy/prometheus):
// a failed log, the queue-delay limit to compare waits with, and timers
// that fired (a saga's deadline, a job's lease), which mean work did not
// finish in time.

// maxTimerKindLen bounds the kind label: a timer id's prefix before "/"
// (saga/ORDER, lease/JOB), or the whole id for the workloads' few fixed
// ids (purge timers), so an unexpected id cannot grow the series count.
const maxTimerKindLen = 16

// alertedTimerKinds are exported at 0 from the start, so an alert on
// their rate sees 0 rather than no data on a healthy node.
var alertedTimerKinds = [...]string{"saga", "lease"}

func newTimersFired() *prometheus.CounterVec {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "surge_engine_timers_fired_total",
		Help: "Timers that fired, by kind: saga (an order's saga reached its deadline and is compensated), lease (a job's lease expired without a report), purge (retention).",
	}, []string{"kind"})
	for _, k := range alertedTimerKinds {
		v.WithLabelValues(k)
	}
	return v
}

// timerKind is the label of a timer id.
func timerKind(id string) string {
	if i := strings.IndexByte(id, '/'); i >= 0 {
		id = id[:i]
	}
	if len(id) > maxTimerKindLen || id == "" {
		return "other"
	}
	return id
}

func (m *Metrics) timerFired(id string) {
	m.timersFired.WithLabelValues(timerKind(id)).Inc()
}

// watchHealth adds the gauges read from the engine at scrape time.
func (m *Metrics) watchHealth(e *Engine) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "surge_engine_log_failed",
		Help: "1 once the command log failed (a write or fsync error): the node refuses every request and /healthz answers 503 until it is restarted; else 0.",
	}, func() float64 {
		if e.Failed() {
			return 1
		}
		return 0
	}))
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "surge_engine_max_queue_delay_seconds",
		Help: "--max-queue-delay: past half of it new requests get 429, past it a queued one is refused (0 when turned off).",
	}, func() float64 { return float64(e.maxWaitNs) / 1e9 }))
}
