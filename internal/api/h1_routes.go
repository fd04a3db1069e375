package api

import (
	"net/http"
	"sync"
	"sync/atomic"
)

// LeanRoutes are the routes the lean HTTP/1.1 path (h1.go) may serve:
// plain request/answer routes whose handler neither streams, flushes,
// hijacks nor uses http.ResponseController, and whose wait is bounded by
// the engine's commit and the route's timeouts. Every other request goes
// to net/http.
type LeanRoutes struct {
	mu sync.Mutex // marks
	// The routes as marked so far, replaced whole by each mark: every
	// request reads them, and a read lock's count would be a cache line
	// every core writes per request (stripes.go says why that matters).
	marked atomic.Pointer[leanMarked]
}

type leanMarked struct {
	mux *http.ServeMux
	set map[string]bool
}

// Lean returns the routes m's HandleLean marked (shared by every view
// of m), for Limits.Lean.
func (m *Metrics) Lean() *LeanRoutes {
	if m == nil {
		return nil
	}
	return m.lean
}

// HandleLean is Handle for a route the lean HTTP/1.1 path may serve
// (LeanRoutes says which routes qualify).
func (m *Metrics) HandleLean(mux *http.ServeMux, pattern string, h HandlerFunc) {
	m.Handle(mux, pattern, h)
	if m != nil && m.lean != nil {
		m.lean.mark(mux, pattern)
	}
}

func (l *LeanRoutes) mark(mux *http.ServeMux, pattern string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	next := &leanMarked{mux: mux, set: map[string]bool{pattern: true}}
	if old := l.marked.Load(); old != nil {
		if old.mux != mux {
			panic("api: lean routes " + pattern + " marked on a second mux; one Metrics serves one mux")
		}
		for p := range old.set {
			next.set[p] = true
		}
	}
	l.marked.Store(next)
}

// serves reports whether r goes, by the mux's own matching, to a lean
// route.
func (l *LeanRoutes) serves(r *http.Request) bool {
	if l == nil {
		return false
	}
	m := l.marked.Load()
	if m == nil {
		return false
	}
	_, pat := m.mux.Handler(r)
	return m.set[pat]
}
