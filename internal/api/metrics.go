package api

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/surge-run/surge/internal/ids"
)

// Metrics counts requests per route and status and times them.
type Metrics struct {
	stats  *httpStats // surge_http_requests_total, surge_http_request_seconds
	panics *prometheus.CounterVec
	// onRoute sees every route registered (WithRouteHook).
	onRoute func(pattern string)
	// lean are the routes marked by HandleLean.
	lean *LeanRoutes
}

// NewMetrics registers the HTTP metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		stats: newHTTPStats(),
		panics: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "surge_http_panics_total",
			Help: "Handler panics caught and answered 500, by route (a bug: the log has the first stack per route).",
		}, []string{"route"}),
		lean: &LeanRoutes{},
	}
	reg.MustRegister(m.stats, m.panics)
	return m
}

// HandlerFunc is a handler that returns the status it sent, so the
// middleware needs no wrapping ResponseWriter.
type HandlerFunc func(w http.ResponseWriter, r *http.Request) int

// Handle registers h under pattern on mux, counting and timing it. The
// per-code counters are resolved once and cached.
func (m *Metrics) Handle(mux *http.ServeMux, pattern string, h HandlerFunc) {
	if literalID(pattern) {
		// The lean path routes a request by an id the way it routed one
		// differing only in that id (leanMemo.byID): a route for one id
		// would break that, and no API names a route by one.
		panic("api: pattern " + pattern + " has a UUID as a literal segment")
	}
	if m != nil && m.onRoute != nil {
		m.onRoute(pattern)
	}
	h = m.recovering(pattern, h)
	if m == nil || m.stats == nil {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) { h(w, r) })
		return
	}
	rs := m.stats.route(pattern)
	mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		code := h(w, r)
		rs.observe(stripeOf(w), time.Since(start).Seconds(), code)
	})
}

// recovering is a safety net, not error handling: every input is meant to
// be refused before it can make a handler panic. Without it net/http would
// recover on its own and drop the connection, so the client would see an
// empty reply instead of an answer. The stack is logged once per route so
// a client repeating the request cannot flood the log; the counter keeps
// the total.
func (m *Metrics) recovering(pattern string, h HandlerFunc) HandlerFunc {
	var logged atomic.Bool
	var count prometheus.Counter
	if m != nil && m.panics != nil {
		count = m.panics.WithLabelValues(pattern)
	}
	return func(w http.ResponseWriter, r *http.Request) (code int) {
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler { // a deliberate abort, not a bug
				panic(v)
			}
			if count != nil {
				count.Inc()
			}
			if !logged.Swap(true) {
				slog.ErrorContext(r.Context(), "HTTP handler panicked; answered 500 (later panics on this route are counted in surge_http_panics_total, not logged)",
					"route", pattern, "method", r.Method, "path", Quote(r.URL.Path), "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			}
			code = Error(w, http.StatusInternalServerError, "internal error: the server failed on this request and logged it; it is not the request's fault")
		}()
		return h(w, r)
	}
}

// fallbacks records the muxes that have a fallback, so every workload's
// Register may ask for it and it is installed once (ServeMux panics on a
// pattern registered twice).
var fallbacks sync.Map // *http.ServeMux -> struct{}

// probeMethods are the methods a fallback checks to tell 405 from 404.
var probeMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions}

// HandleFallback makes every request that matches no route get a JSON
// error like every other refusal, instead of the router's plain text: 405
// with Allow if the path exists for other methods, 404 otherwise.
func (m *Metrics) HandleFallback(mux *http.ServeMux) {
	if _, done := fallbacks.LoadOrStore(mux, struct{}{}); done {
		return
	}
	m.Handle(mux, "/", func(w http.ResponseWriter, r *http.Request) int {
		var allow []string
		for _, method := range probeMethods {
			if method == r.Method {
				continue
			}
			probe := *r
			probe.Method = method
			if _, pat := mux.Handler(&probe); pat != "/" && pat != "" {
				allow = append(allow, method)
			}
		}
		if len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			return Error(w, http.StatusMethodNotAllowed, "method "+Quote(r.Method)+" is not allowed on "+Quote(r.URL.Path)+"; use "+strings.Join(allow, ", "))
		}
		return Error(w, http.StatusNotFound, "no route "+Quote(r.URL.Path)+"; see docs/API.md for the routes")
	})
}

// literalID says whether a segment of pattern's path is a UUID literal
// (as the mux reads it, unescaped).
func literalID(pattern string) bool {
	i := strings.IndexByte(pattern, '/')
	if i < 0 {
		return false
	}
	for _, seg := range strings.Split(pattern[i+1:], "/") {
		if strings.HasPrefix(seg, "{") {
			continue
		}
		if v, err := url.PathUnescape(seg); err == nil {
			seg = v
		}
		if _, ok := ids.Parse(seg); ok {
			return true
		}
	}
	return false
}
