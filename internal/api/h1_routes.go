package api

import (
	"net/http"
	"net/url"
	"strings"
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
	set map[string]*leanPattern
}

// leanPattern is a lean pattern's path, parsed once so that the handler the
// lean servers matched can be called without matching the request again
// (Handler). direct is false for a pattern whose wildcards this parse
// does not model ({x...}, {$}, a trailing slash, a host): such a route is
// still lean, but the mux matches it a second time to bind its values.
type leanPattern struct {
	direct bool
	segs   int        // the path's segments
	wild   []leanWild // its {name} segments
}

type leanWild struct {
	seg  int
	name string
}

// leanMatch is the route a lean server matched a request to when it
// decided to serve it. The URL and method it was matched with are kept:
// a handler in front of the mux that changes either (collapseSlashes
// builds a new URL) makes the match stale, and the mux matches again.
type leanMatch struct {
	mux     *http.ServeMux
	url     *url.URL
	method  string
	pattern string
	h       http.Handler
	route   *leanPattern
}

// leanMatcher is a lean server's ResponseWriter: it carries its
// request's match to Handler.
type leanMatcher interface{ leanMatched() *leanMatch }

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
		l.mux, l.set = mux, map[string]*leanPattern{}
	}
	if l.mux != mux {
		panic("api: lean routes " + pattern + " marked on a second mux; one Metrics serves one mux")
	}
	l.set[pattern] = parseLeanPattern(pattern)
}

// parseLeanPattern models "[METHOD ]/literal/{name}/literal" patterns,
// the only shape the lean routes have; anything else is not direct.
func parseLeanPattern(pattern string) *leanPattern {
	rt := &leanPattern{}
	path := pattern
	if i := strings.IndexAny(pattern, " \t"); i >= 0 {
		path = strings.TrimLeft(pattern[i:], " \t")
	}
	if !strings.HasPrefix(path, "/") || strings.HasSuffix(path, "/") {
		return rt // a host, the root or a subtree: the mux binds these
	}
	for i, seg := range strings.Split(path[1:], "/") {
		switch {
		case seg == "" || strings.Contains(seg, "..."):
			return rt
		case strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}"):
			name := seg[1 : len(seg)-1]
			if name == "" || name == "$" || strings.ContainsAny(name, "{}") {
				return rt
			}
			rt.wild = append(rt.wild, leanWild{seg: i, name: name})
		case strings.ContainsAny(seg, "{}"):
			return rt
		}
		rt.segs = i + 1
	}
	rt.direct = true
	return rt
}

// match reports whether r goes, by the mux's own matching, to a lean
// route, and if so keeps the match in m for Handler.
func (l *LeanRoutes) match(r *http.Request, m *leanMatch) bool {
	*m = leanMatch{}
	if l == nil {
		return false
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.mux == nil {
		return false
	}
	h, pat := l.mux.Handler(r)
	rt := l.set[pat]
	if rt == nil {
		return false
	}
	if rt.direct {
		*m = leanMatch{mux: l.mux, url: r.URL, method: r.Method, pattern: pat, h: h, route: rt}
	}
	return true
}

// Handler returns mux, the mux the routes were marked on, with one
// difference: a request a lean server matched already goes to its
// handler without being matched again (a match costs about as much as
// the rest of the lean path's parsing; the profiles in
// docs/BENCHMARKS.md, "HTTP/1.1 lean path", show it twice per request).
// Its path values and Pattern are set as the mux would set them.
func (l *LeanRoutes) Handler(mux *http.ServeMux) http.Handler {
	if l == nil {
		return mux
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if lm, ok := w.(leanMatcher); ok {
			m := lm.leanMatched()
			h, ok := m.bind(mux, r)
			*m = leanMatch{}
			if ok {
				h.ServeHTTP(w, r)
				return
			}
		}
		mux.ServeHTTP(w, r)
	})
}

// bind sets r's path values from the match and returns its handler, if
// the match is r's, made on mux.
func (m *leanMatch) bind(mux *http.ServeMux, r *http.Request) (http.Handler, bool) {
	if m.h == nil || m.mux != mux || m.url != r.URL || m.method != r.Method {
		return nil, false
	}
	r.Pattern = m.pattern
	rt := m.route
	// The mux matched the escaped path, segment by segment, and unescaped
	// each wildcard's segment (net/http's routingNode.matchPath).
	path := r.URL.EscapedPath()
	if len(path) == 0 || path[0] != '/' {
		return nil, false
	}
	path = path[1:]
	w := 0
	for i := 0; i < rt.segs; i++ {
		seg, rest, _ := strings.Cut(path, "/")
		if w < len(rt.wild) && rt.wild[w].seg == i {
			if v, err := url.PathUnescape(seg); err == nil {
				seg = v
			}
			r.SetPathValue(rt.wild[w].name, seg)
			w++
		}
		path = rest
	}
	return m.h, true
}
