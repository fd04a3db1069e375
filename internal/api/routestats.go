package api

import (
	"math"
	"math/rand/v2"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// httpStats are surge_http_requests_total and surge_http_request_seconds,
// kept in stripes (stripes.go): a prometheus HistogramVec child is one
// count, one sum (added by compare-and-swap) and buckets that every core
// writes per request on the route, and its per-code counters likewise.
// Here each connection's requests add to its stripe, and a scrape sums
// the stripes into the same series, names, labels and buckets.
type httpStats struct {
	reqDesc, latDesc *prometheus.Desc
	mu               sync.Mutex
	routes           []*routeStats
	byPattern        map[string]*routeStats
}

// latencyBuckets bounds surge_http_request_seconds: 50 µs doubling to
// about 1.6 s, then +Inf.
const latencyBuckets = 16

var latencyBounds = prometheus.ExponentialBuckets(50e-6, 2, latencyBuckets)

// routeCodes is how many status codes of one route are counted in
// stripes; a route's further codes get one shared counter each (a route
// answers a handful).
const routeCodes = 8

func newHTTPStats() *httpStats {
	return &httpStats{
		reqDesc:   prometheus.NewDesc("surge_http_requests_total", "HTTP requests by route and status code.", []string{"route", "code"}, nil),
		latDesc:   prometheus.NewDesc("surge_http_request_seconds", "HTTP request handling time by route.", []string{"route"}, nil),
		byPattern: map[string]*routeStats{},
	}
}

// route is pattern's stats, made at its first registration.
func (s *httpStats) route(pattern string) *routeStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rs := s.byPattern[pattern]; rs != nil {
		return rs
	}
	rs := &routeStats{pattern: pattern, stripes: make([]routeStripe, stripeCount())}
	s.byPattern[pattern] = rs
	s.routes = append(s.routes, rs)
	return rs
}

func (s *httpStats) Describe(ch chan<- *prometheus.Desc) {
	ch <- s.reqDesc
	ch <- s.latDesc
}

func (s *httpStats) Collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	routes := s.routes
	s.mu.Unlock()
	for _, rs := range routes {
		rs.collect(s, ch)
	}
}

// routeStats counts and times one route's requests.
type routeStats struct {
	pattern string
	codes   [routeCodes]atomic.Int32 // each slot's code; 0 while free
	stripes []routeStripe
	more    sync.Map // code (int) -> *atomic.Uint64, once the slots are taken
}

type routeStripe struct {
	buckets [latencyBuckets + 1]atomic.Uint64 // per bound; the last past them all
	sumBits atomic.Uint64                     // seconds, a float64's bits
	codes   [routeCodes]atomic.Uint64
	_       [64]byte // the next stripe's first line is its own
}

// observe counts a request answered code after seconds, in the stripe.
func (rs *routeStats) observe(stripe uint32, seconds float64, code int) {
	st := &rs.stripes[stripe%uint32(len(rs.stripes))]
	st.buckets[sort.SearchFloat64s(latencyBounds, seconds)].Add(1)
	for {
		old := st.sumBits.Load()
		if st.sumBits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+seconds)) {
			break
		}
	}
	if i := rs.slot(code); i >= 0 {
		st.codes[i].Add(1)
		return
	}
	n, _ := rs.more.LoadOrStore(code, new(atomic.Uint64))
	n.(*atomic.Uint64).Add(1)
}

// slot is code's slot, taken at its first request; -1 once all are
// taken by other codes (or for a code that is no status).
func (rs *routeStats) slot(code int) int {
	if code <= 0 || code > math.MaxInt32 {
		return -1
	}
	for i := range rs.codes {
		if rs.codes[i].Load() == 0 {
			rs.codes[i].CompareAndSwap(0, int32(code)) // or another code took it first
		}
		if rs.codes[i].Load() == int32(code) {
			return i
		}
	}
	return -1
}

func (rs *routeStats) collect(s *httpStats, ch chan<- prometheus.Metric) {
	var counts [latencyBuckets + 1]uint64
	var byCode [routeCodes]uint64
	var sum float64
	for i := range rs.stripes {
		st := &rs.stripes[i]
		for b := range counts {
			counts[b] += st.buckets[b].Load()
		}
		for c := range byCode {
			byCode[c] += st.codes[c].Load()
		}
		sum += math.Float64frombits(st.sumBits.Load())
	}
	// The count is the buckets' sum, so that it never disagrees with
	// them, read while requests add to both.
	cum := make(map[float64]uint64, latencyBuckets)
	var total uint64
	for b, bound := range latencyBounds {
		total += counts[b]
		cum[bound] = total
	}
	total += counts[latencyBuckets]
	ch <- prometheus.MustNewConstHistogram(s.latDesc, total, sum, cum, rs.pattern)
	for i := range rs.codes {
		if c := rs.codes[i].Load(); c != 0 {
			ch <- prometheus.MustNewConstMetric(s.reqDesc, prometheus.CounterValue, float64(byCode[i]), rs.pattern, strconv.Itoa(int(c)))
		}
	}
	rs.more.Range(func(k, v any) bool {
		ch <- prometheus.MustNewConstMetric(s.reqDesc, prometheus.CounterValue, float64(v.(*atomic.Uint64).Load()), rs.pattern, strconv.Itoa(k.(int)))
		return true
	})
}

// stripedWriter is a lean server's ResponseWriter, which knows its
// connection's stripe.
type stripedWriter interface{ stripe() uint32 }

// stripeOf is the stripe of the request w answers: its connection's on
// the lean servers, any on net/http's, whose connection is not known
// here.
func stripeOf(w http.ResponseWriter) uint32 {
	if s, ok := w.(stripedWriter); ok {
		return s.stripe()
	}
	return rand.Uint32()
}
