package api

import (
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// inflightLimiter caps the requests being handled at once over every
// connection. Connections and h2 streams are capped too, but their product
// is far more work than the server can hold; past the cap a request is
// answered 503 at once instead of queuing behind the others.
type inflightLimiter struct {
	next     http.Handler
	max      int64
	exempt   map[string]bool
	prefixes []string
	n        atomic.Int64
	refused  atomic.Uint64
	msg      string
}

func newInflightLimiter(next http.Handler, max int, exempt []string) *inflightLimiter {
	l := &inflightLimiter{next: next, max: int64(max), exempt: map[string]bool{}}
	for _, p := range exempt {
		if strings.HasSuffix(p, "/") {
			l.prefixes = append(l.prefixes, p)
		} else {
			l.exempt[p] = true
		}
	}
	l.msg = "the server is handling its limit of " + strconv.Itoa(max) + " requests at once; retry in a second"
	return l
}

func (l *inflightLimiter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if l.isExempt(r.URL.Path) {
		l.next.ServeHTTP(w, r)
		return
	}
	if l.n.Add(1) > l.max {
		l.n.Add(-1)
		l.refused.Add(1)
		Error(w, http.StatusServiceUnavailable, l.msg)
		return
	}
	defer l.n.Add(-1)
	l.next.ServeHTTP(w, r)
}

func (l *inflightLimiter) isExempt(path string) bool {
	if l.exempt[path] {
		return true
	}
	for _, p := range l.prefixes {
		if strings.HasPrefix(path, p) {
			return true
		}
	}
	return false
}

// registerMetrics exports the connection and in-flight counts. They are
// read at scrape time from the counters the limiters keep anyway, so the
// request path pays nothing for them.
func registerMetrics(reg prometheus.Registerer, t *connTracker, l *inflightLimiter) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "surge_http_connections_open",
			Help: "Client connections open now.",
		}, func() float64 { return float64(t.openConns()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "surge_http_connections_limit",
			Help: "Cap on open client connections (--max-conns, or derived from the open-file limit).",
		}, func() float64 { return float64(t.max) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "surge_http_connections_shed_total",
			Help: "Idle connections closed to make room for a new one at the connection cap.",
		}, func() float64 { return float64(t.shed.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "surge_http_connections_refused_total",
			Help: "Connections answered 503 and closed because every connection was busy at the cap.",
		}, func() float64 { return float64(t.refused.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "surge_http_requests_inflight",
			Help: "Requests being handled now (exempt paths not counted).",
		}, func() float64 { return float64(l.n.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "surge_http_requests_refused_total",
			Help: "Requests answered 503 because --max-inflight requests were already being handled.",
		}, func() float64 { return float64(l.refused.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "surge_http_body_bytes_held",
			Help: "Bytes of large request bodies held now, counted against --max-body-memory.",
		}, func() float64 { return float64(Bodies.Held()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "surge_http_body_waits_total",
			Help: "Requests whose body waited for room under --max-body-memory before it was read.",
		}, func() float64 { return float64(Bodies.waits.Load()) }),
	)
}
