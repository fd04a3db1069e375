package api

import (
	"net/http"
	"sync"
)

// LeanRoutes are the routes the lean HTTP/1.1 path (h1.go) may serve:
// plain request/answer routes whose handler neither streams, flushes,
// hijacks nor uses http.ResponseController, and whose wait is bounded by
// the engine's commit and the route's timeouts. Every other request goes
// to net/http.
type LeanRoutes struct {
	mu  sync.RWMutex
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
	if l.mux == nil {
		l.mux, l.set = mux, map[string]bool{}
	}
	if l.mux != mux {
		panic("api: lean routes " + pattern + " marked on a second mux; one Metrics serves one mux")
	}
	l.set[pattern] = true
}

// serves reports whether r goes, by the mux's own matching, to a lean
// route.
func (l *LeanRoutes) serves(r *http.Request) bool {
	if l == nil {
		return false
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.mux == nil {
		return false
	}
	_, pat := l.mux.Handler(r)
	return l.set[pat]
}
