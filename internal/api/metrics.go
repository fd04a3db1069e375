package api

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics counts requests per route and status and times them.
type Metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

// NewMetrics registers the HTTP metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "surge_http_requests_total",
			Help: "HTTP requests by route and status code.",
		}, []string{"route", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "surge_http_request_seconds",
			Help:    "HTTP request handling time by route.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16),
		}, []string{"route"}),
	}
	reg.MustRegister(m.requests, m.latency)
	return m
}

// HandlerFunc is a handler that returns the status it sent, so the
// middleware needs no wrapping ResponseWriter.
type HandlerFunc func(w http.ResponseWriter, r *http.Request) int

// Handle registers h under pattern on mux, counting and timing it. The
// per-code counters are resolved once and cached.
func (m *Metrics) Handle(mux *http.ServeMux, pattern string, h HandlerFunc) {
	if m == nil {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) { h(w, r) })
		return
	}
	lat := m.latency.WithLabelValues(pattern)
	var codes sync.Map // int -> prometheus.Counter
	mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		code := h(w, r)
		lat.Observe(time.Since(start).Seconds())
		c, ok := codes.Load(code)
		if !ok {
			c, _ = codes.LoadOrStore(code, m.requests.WithLabelValues(pattern, strconv.Itoa(code)))
		}
		c.(prometheus.Counter).Inc()
	})
}
