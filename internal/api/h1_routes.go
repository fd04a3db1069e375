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
// route. memo, the connection's, remembers recent answers.
func (l *LeanRoutes) serves(r *http.Request, memo *leanMemo) bool {
	if l == nil {
		return false
	}
	m := l.marked.Load()
	if m == nil {
		return false
	}
	if lean, ok := memo.find(m, r); ok {
		return lean
	}
	_, pat := m.mux.Handler(r)
	lean := m.set[pat]
	memo.keep(m, r, lean)
	return lean
}

// leanMemo is one connection's last answers of serves, so that a client
// repeating a request line (the same event's reservation POSTs, the
// native flow's one route) is matched by the mux once per connection,
// not per request: a match is a few per cent of such a request's CPU, and
// the dispatch matches again anyway. The mux's answer depends only on the
// method, host and path (and on the routes marked, m), so an entry with
// all of them equal is that answer. Two entries, replaced by the clock
// rule: a miss takes an entry not used since the last miss, so an
// alternating line that never repeats (a GET by a new id each time)
// does not push out one that does.
type leanMemo struct {
	e    [2]leanMemoEntry
	hand int
}

type leanMemoEntry struct {
	m                           *leanMarked
	method, host, path, rawPath string
	// path's last byte, kept here: the path's own bytes are an earlier
	// request's, out of the cache by now, and reading them for every
	// miss was 2 % of the server's CPU in compat profiles.
	last       byte
	lean, used bool
}

func (e *leanMemoEntry) is(m *leanMarked, r *http.Request) bool {
	p := r.URL.Path
	// Paths of one length mostly differ in an id at their end: look
	// there before comparing the whole.
	if len(e.path) != len(p) || len(p) > 0 && e.last != p[len(p)-1] {
		return false
	}
	return e.m == m && e.path == p && e.method == r.Method &&
		e.host == r.Host && e.rawPath == r.URL.RawPath
}

func (memo *leanMemo) find(m *leanMarked, r *http.Request) (lean, ok bool) {
	for i := range memo.e {
		if e := &memo.e[i]; e.is(m, r) {
			e.used = true
			return e.lean, true
		}
	}
	return false, false
}

func (memo *leanMemo) keep(m *leanMarked, r *http.Request, lean bool) {
	for memo.e[memo.hand].used {
		memo.e[memo.hand].used = false
		memo.hand = (memo.hand + 1) % len(memo.e)
	}
	e := leanMemoEntry{m: m, method: r.Method, host: r.Host,
		path: r.URL.Path, rawPath: r.URL.RawPath, lean: lean}
	if p := r.URL.Path; len(p) > 0 {
		e.last = p[len(p)-1]
	}
	memo.e[memo.hand] = e
	memo.hand = (memo.hand + 1) % len(memo.e)
}
