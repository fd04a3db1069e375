package api

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/surge-run/surge/internal/promtest"
)

// requestsTotal is surge_http_requests_total{route, code} in reg.
func requestsTotal(t *testing.T, reg *prometheus.Registry, route, code string) float64 {
	t.Helper()
	v, _ := counterWith(t, reg, "surge_http_requests_total", "code="+code+",route="+route)
	return v
}

// counterWith is the counter name{labels} in reg, labels as labelsOf
// writes them; false if it has no such series.
func counterWith(t *testing.T, reg *prometheus.Registry, name, labels string) (float64, bool) {
	t.Helper()
	return promtest.Value(t, reg, name, func(m *dto.Metric) bool { return labelsOf(m) == labels })
}

func labelsOf(m *dto.Metric) string {
	s := ""
	for i, l := range m.GetLabel() {
		if i > 0 {
			s += ","
		}
		s += l.GetName() + "=" + l.GetValue()
	}
	return s
}

// TestRouteStatsAsPrometheus: the striped stats expose, for the same
// requests, exactly the series prometheus's own HistogramVec and
// CounterVec would (names, help, labels, buckets, counts; sums to
// rounding), whatever stripes the requests land in, past the slots for
// codes too.
func TestRouteStatsAsPrometheus(t *testing.T) {
	ours, theirs := prometheus.NewRegistry(), prometheus.NewRegistry()
	stats := newHTTPStats()
	ours.MustRegister(stats)
	reqs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "surge_http_requests_total", Help: "HTTP requests by route and status code."}, []string{"route", "code"})
	lat := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "surge_http_request_seconds", Help: "HTTP request handling time by route.", Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16)}, []string{"route"})
	theirs.MustRegister(reqs, lat)
	rng := rand.New(rand.NewPCG(1, 2))
	routes := []string{"GET /a/{id}", "POST /b", "GET /unused"}
	for _, r := range routes {
		stats.route(r)
		lat.WithLabelValues(r)
	}
	codes := []int{200, 201, 400, 404, 409, 413, 422, 429, 500, 503, 599, 0, -1}
	for range 20000 {
		route := routes[rng.IntN(2)]
		code := codes[rng.IntN(len(codes))]
		secs := math.Exp(rng.Float64()*20 - 14) // 1 µs to 400 s, every bucket
		if rng.IntN(50) == 0 {
			secs = latencyBounds[rng.IntN(latencyBuckets)] // on a bound: le is inclusive
		}
		stats.route(route).observe(rng.Uint32(), secs, code)
		lat.WithLabelValues(route).Observe(secs)
		reqs.WithLabelValues(route, fmt.Sprint(code)).Inc()
	}
	a, err := ours.Gather()
	if err != nil {
		t.Fatal(err)
	}
	b, err := theirs.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != len(b) {
		t.Fatalf("%d families, want %d", len(a), len(b))
	}
	for i := range a {
		if a[i].GetName() != b[i].GetName() || a[i].GetHelp() != b[i].GetHelp() || a[i].GetType() != b[i].GetType() || len(a[i].GetMetric()) != len(b[i].GetMetric()) {
			t.Fatalf("family %d: %v %q %v (%d series), want %v %q %v (%d)", i, a[i].GetName(), a[i].GetHelp(), a[i].GetType(), len(a[i].GetMetric()), b[i].GetName(), b[i].GetHelp(), b[i].GetType(), len(b[i].GetMetric()))
		}
		for j, m := range a[i].GetMetric() {
			w := b[i].GetMetric()[j]
			if labelsOf(m) != labelsOf(w) {
				t.Fatalf("%s series %d: labels %s, want %s", a[i].GetName(), j, labelsOf(m), labelsOf(w))
			}
			if c := m.GetCounter(); c != nil && c.GetValue() != w.GetCounter().GetValue() {
				t.Errorf("%s{%s} = %v, want %v", a[i].GetName(), labelsOf(m), c.GetValue(), w.GetCounter().GetValue())
			}
			if h := m.GetHistogram(); h != nil {
				wh := w.GetHistogram()
				if h.GetSampleCount() != wh.GetSampleCount() || math.Abs(h.GetSampleSum()-wh.GetSampleSum()) > 1e-9*math.Abs(wh.GetSampleSum()) {
					t.Errorf("%s{%s}: count %d sum %v, want %d %v", a[i].GetName(), labelsOf(m), h.GetSampleCount(), h.GetSampleSum(), wh.GetSampleCount(), wh.GetSampleSum())
				}
				for k, bk := range h.GetBucket() {
					if wb := wh.GetBucket()[k]; bk.GetUpperBound() != wb.GetUpperBound() || bk.GetCumulativeCount() != wb.GetCumulativeCount() {
						t.Errorf("%s{%s} bucket le=%v: %d, want le=%v %d", a[i].GetName(), labelsOf(m), bk.GetUpperBound(), bk.GetCumulativeCount(), wb.GetUpperBound(), wb.GetCumulativeCount())
					}
				}
			}
		}
	}
}

// TestRouteStatsConcurrent: requests counted at once from many
// goroutines, each on a stripe of its own or a shared one, are all
// counted, once, under the race detector, while scrapes run.
func TestRouteStatsConcurrent(t *testing.T) {
	reg := prometheus.NewRegistry()
	stats := newHTTPStats()
	reg.MustRegister(stats)
	rs := stats.route("GET /x")
	const goroutines, each = 16, 2000
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				rs.observe(uint32(g%3), 0.001, 200+(g+i)%12)
			}
		}()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 20 {
			if _, err := reg.Gather(); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	wg.Wait()
	<-done
	var total float64
	for c := 200; c < 212; c++ {
		total += requestsTotal(t, reg, "GET /x", fmt.Sprint(c))
	}
	if total != goroutines*each {
		t.Fatalf("%v requests counted, want %d", total, goroutines*each)
	}
}

// BenchmarkRouteObserve is a route's request counted and timed by the
// striped stats, each goroutine a connection of its own
// (-cpu 1,2,...: the cost per request as cores share the route).
func BenchmarkRouteObserve(b *testing.B) {
	rs := newHTTPStats().route("GET /x")
	var next atomic.Uint32
	b.RunParallel(func(pb *testing.PB) {
		stripe := next.Add(1)
		for pb.Next() {
			rs.observe(stripe, 0.0003, 200)
		}
	})
}

// BenchmarkRouteObservePrometheus is the same with prometheus's own
// HistogramVec child and counter, as the route was counted before.
func BenchmarkRouteObservePrometheus(b *testing.B) {
	lat := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "l", Buckets: latencyBounds}, []string{"route"}).WithLabelValues("GET /x")
	n := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "n"}, []string{"route", "code"}).WithLabelValues("GET /x", "200")
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			lat.Observe(0.0003)
			n.Inc()
		}
	})
}
