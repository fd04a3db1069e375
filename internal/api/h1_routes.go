package api

import (
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/surge-run/surge/internal/ids"
)

// LeanRoutes are the routes the lean HTTP/1.1 path (h1.go) may serve:
// plain request/answer routes whose handler neither streams, flushes,
// hijacks nor uses http.ResponseController, whose wait is bounded by
// the engine's commit and the route's timeouts, which do not rely on
// the request's context ending when the handler returns (on the lean
// path it never ends unless the waiting room watched the client:
// h1_watch.go), and which keep nothing of the request (the Request, its
// header map, its URL) past their return: the connection reuses them.
// Every other request goes to net/http.
type LeanRoutes struct {
	mu sync.Mutex // marks
	// The routes as marked so far, replaced whole by each mark: every
	// request reads them, and a read lock's count would be a cache line
	// every core writes per request (stripes.go says why that matters).
	marked atomic.Pointer[leanMarked]
}

type leanMarked struct {
	mux *http.ServeMux
	set map[string]*leanRouteInfo // by pattern
}

// leanRouteInfo is what the lean path learns of a marked route.
type leanRouteInfo struct {
	// readsPathValue: its handler reads its path values with PathValue,
	// so a request dispatched by its match need not have them set in r.
	// Learnt at the first call, so that a route reading r.PathValue
	// still finds them there.
	readsPathValue atomic.Bool
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
// (LeanRoutes says which routes qualify). A handler that reads its path
// values with PathValue, not r.PathValue, spares each request a map; it
// must then read them all so.
func (m *Metrics) HandleLean(mux *http.ServeMux, pattern string, h HandlerFunc) {
	m.Handle(mux, pattern, h)
	if m != nil && m.lean != nil {
		m.lean.mark(mux, pattern)
	}
}

func (l *LeanRoutes) mark(mux *http.ServeMux, pattern string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	next := &leanMarked{mux: mux, set: map[string]*leanRouteInfo{pattern: {}}}
	if old := l.marked.Load(); old != nil {
		if old.mux != mux {
			panic("api: lean routes " + pattern + " marked on a second mux; one Metrics serves one mux")
		}
		for p, info := range old.set {
			next.set[p] = info
		}
	}
	l.marked.Store(next)
}

// match is whether r goes, by the mux's own matching, to a lean route,
// and where: the mux's match, which the dispatch (leanDispatch) then
// uses instead of matching again; nil if r's route is not lean. memo,
// the connection's, remembers recent answers; the match is its, valid
// until its next match.
func (l *LeanRoutes) match(r *http.Request, memo *leanMemo) *leanMatch {
	if e := l.entry(r, memo); e != nil {
		return e.matched()
	}
	return nil
}

// sharedMatch is match for a holder that outlives the memo's entry (an
// HTTP/2 stream, whose handler runs while the connection's reader routes
// other streams): a copy never written again, made once per entry, so
// that the streams of one request line share it. A copy per stream was
// 224 bytes more for each of a flash crowd's waiting streams.
func (l *LeanRoutes) sharedMatch(r *http.Request, memo *leanMemo) *leanMatch {
	e := l.entry(r, memo)
	if e == nil || !e.lean {
		return nil
	}
	if e.shared == nil {
		sm := &sharedLeanMatch{m: e.match}
		sm.m.names = append(sm.room[:0:1], e.match.names...)
		sm.m.vals = append(sm.room[1:1], e.match.vals...)
		e.shared = &sm.m
	}
	return e.shared
}

// entry is the memo's entry for r, matched by the mux if the memo did
// not have it; nil without marked routes.
func (l *LeanRoutes) entry(r *http.Request, memo *leanMemo) *leanMemoEntry {
	if l == nil {
		return nil
	}
	m := l.marked.Load()
	if m == nil {
		return nil
	}
	if e := memo.find(m, r); e != nil {
		return e
	}
	if e := memo.byID(m, r); e != nil {
		return e
	}
	h, pat := m.mux.Handler(r)
	info := m.set[pat]
	e := memo.keep(m, r, info != nil)
	if e.lean {
		e.match = leanMatch{mux: m.mux, h: h, pattern: pat, route: info}
		mt := &e.match
		mt.names, mt.vals, mt.ok = pathValues(pat, r.URL.EscapedPath(), e.nameBuf[:0], e.valBuf[:0])
		e.byID = mt.ok && len(mt.vals) <= len(e.valBuf) && endsInID(pat, r)
	}
	return e
}

// leanMatch is the mux's match of a lean request: its route's handler,
// pattern and path values. Found once per request line by match, it
// spares the dispatch behind the gates a second match, about a
// microsecond of the mux's tree walk, unescaping and cleaning: 4 % of a
// compat reservation's CPU (a POST and a GET) in profiles.
type leanMatch struct {
	mux     *http.ServeMux
	h       http.Handler
	pattern string
	route   *leanRouteInfo
	// The pattern's wildcards and their values in r's path, in order;
	// ok says they were found (pathValues), else the mux matches again.
	names, vals []string
	ok          bool
}

// sharedLeanMatch is a shared match (sharedMatch) and room for the names
// and values of one wildcard, the lean routes' most, in one allocation.
type sharedLeanMatch struct {
	m    leanMatch
	room [2]string
}

// pathValues returns the values of pattern's wildcards in the escaped
// path the mux matched it to, as the mux finds them: segment by
// segment, each value unescaped. It handles patterns of a path and
// whole-segment single wildcards only, which are all the lean routes'
// (ok false for any other: a host, {$}, {x...}, a subtree), on a path
// the mux takes as it is (ok false for one it would clean, and answer
// with a redirect, or might: a segment starting with a dot).
// The names and values are appended to names and vals.
func pathValues(pattern, path string, names, vals []string) ([]string, []string, bool) {
	if strings.Contains(path, "//") || strings.Contains(path, "/.") {
		return nil, nil, false
	}
	if i := strings.IndexAny(pattern, " \t"); i >= 0 {
		pattern = strings.TrimLeft(pattern[i:], " \t")
	}
	switch {
	case !strings.HasPrefix(pattern, "/"):
		return nil, nil, false // a host, or no path
	case !strings.Contains(pattern, "{"):
		return nil, nil, true // nothing to find
	case strings.HasSuffix(pattern, "/") || strings.Contains(pattern, "...}") || strings.Contains(pattern, "{$}"):
		return nil, nil, false
	}
	if strings.Count(pattern, "/") != strings.Count(path, "/") {
		return nil, nil, false
	}
	pattern, path = pattern[1:], path[1:]
	for {
		pseg, prest, more := strings.Cut(pattern, "/")
		seg, rest, _ := strings.Cut(path, "/")
		if len(pseg) > 2 && pseg[0] == '{' && pseg[len(pseg)-1] == '}' {
			v, err := url.PathUnescape(seg)
			if err != nil {
				v = seg // as the mux's own unescaping
			}
			names, vals = append(names, pseg[1:len(pseg)-1]), append(vals, v)
		}
		if !more {
			break
		}
		pattern, path = prest, rest
	}
	return names, vals, true
}

// leanMemo is one connection's last answers of match, so that a client
// repeating a request line (the same event's reservation POSTs, the
// native flow's one route) is matched by the mux once per connection,
// not per request: a match is a few per cent of such a request's CPU,
// and the dispatch uses the entry's match (leanDispatch) rather than
// matching again. The mux's answer depends only on the method, host and
// path (and on the routes marked, m), so an entry with all of them equal
// is that answer. Two entries, replaced by the clock
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
	// The path's bytes, copied here when short: the path's own are an
	// earlier request's, out of the cache by now, and comparing them on
	// every hit (a repeated POST) or reading their last byte on every
	// miss (a GET by a new id) was 1 to 2 % of the server's CPU in
	// compat profiles; the entry's bytes are the connection's own.
	inline     [leanMemoInline]byte
	lean, used bool
	// byID: the path ends in an id (a UUID) that the pattern takes as
	// its last wildcard, so a request differing from this one only in
	// that id goes where this one went (leanMemo.byID).
	byID   bool
	match  leanMatch  // a lean route's
	shared *leanMatch // match's copy for HTTP/2 streams (sharedMatch)
	// Room for the names and values of up to four wildcards, so that a
	// match allocates nothing.
	nameBuf, valBuf [4]string
}

// leanMemoInline is the longest path an entry keeps a copy of.
const leanMemoInline = 64

func (e *leanMemoEntry) matched() *leanMatch {
	if !e.lean {
		return nil
	}
	return &e.match
}

func (e *leanMemoEntry) is(m *leanMarked, r *http.Request) bool {
	p := r.URL.Path
	if len(e.path) != len(p) {
		return false
	}
	if len(p) <= leanMemoInline {
		// Paths of one length mostly differ in an id at their end:
		// look there first.
		if len(p) > 0 && e.inline[len(p)-1] != p[len(p)-1] || string(e.inline[:len(p)]) != p {
			return false
		}
	} else if e.path != p {
		return false
	}
	return e.m == m && e.method == r.Method && e.host == r.Host && e.rawPath == r.URL.RawPath
}

func (memo *leanMemo) find(m *leanMarked, r *http.Request) *leanMemoEntry {
	for i := range memo.e {
		if e := &memo.e[i]; e.is(m, r) {
			e.used = true
			return e
		}
	}
	return nil
}

// byID is a new entry for r matched as an entry differing from it only
// in the id its path ends in was (byID), without the mux; nil if there is
// none. It spares the mux's match a GET by a new id each time (the
// compat flow's every second request), about 3 % of a compat
// reservation's CPU over HTTP/1.1 in profiles.
//
// The mux's answer for r can differ from the entry's only if a pattern
// has r's id as a literal segment there (a literal beats a wildcard).
// No pattern may have a UUID as a literal segment (Metrics.Handle
// refuses one; the server's other routes are fixed paths), so it does
// not. The method, host, the rest of the path and its escaping are the
// entry's, and a UUID needs no escaping, cleaning or redirect.
func (memo *leanMemo) byID(m *leanMarked, r *http.Request) *leanMemoEntry {
	p := r.URL.Path
	cut := strings.LastIndexByte(p, '/') + 1
	if cut == 0 || len(p)-cut != ids.Len || r.URL.RawPath != "" {
		return nil
	}
	for i := range memo.e {
		src := &memo.e[i]
		if !src.byID || src.m != m || len(src.path) != len(p) || src.method != r.Method || src.host != r.Host || !src.prefixIs(p[:cut]) {
			continue
		}
		if _, ok := ids.Parse(p[cut:]); !ok {
			return nil
		}
		// The values are the entry's but the last, this id (which has
		// nothing to unescape); copied first, since the new entry may
		// take the place of src.
		mt, names, vals := src.match, src.nameBuf, src.valBuf
		e := memo.keep(m, r, true)
		e.match, e.byID, e.nameBuf, e.valBuf = mt, true, names, vals
		e.match.names, e.match.vals = e.nameBuf[:len(mt.names)], e.valBuf[:len(mt.vals)]
		e.match.vals[len(mt.vals)-1] = p[cut:]
		return e
	}
	return nil
}

// prefixIs says whether the entry's path starts with prefix, read from
// its copy when it has one.
func (e *leanMemoEntry) prefixIs(prefix string) bool {
	if len(e.path) <= leanMemoInline {
		return string(e.inline[:len(prefix)]) == prefix
	}
	return e.path[:len(prefix)] == prefix
}

// endsInID says whether r's path ends in a UUID that pattern, matched to
// it, takes as its last wildcard (a whole segment, {name}), with nothing
// escaped.
func endsInID(pattern string, r *http.Request) bool {
	if r.Method == http.MethodConnect || r.URL.RawPath != "" {
		return false
	}
	last := pattern[strings.LastIndexByte(pattern, '/')+1:]
	if len(last) < 3 || last[0] != '{' || last[len(last)-1] != '}' || strings.HasSuffix(last, "...}") || last == "{$}" {
		return false
	}
	p := r.URL.Path
	_, ok := ids.Parse(p[strings.LastIndexByte(p, '/')+1:])
	return ok
}

func (memo *leanMemo) keep(m *leanMarked, r *http.Request, lean bool) *leanMemoEntry {
	for memo.e[memo.hand].used {
		memo.e[memo.hand].used = false
		memo.hand = (memo.hand + 1) % len(memo.e)
	}
	e := &memo.e[memo.hand]
	*e = leanMemoEntry{m: m, method: r.Method, host: r.Host,
		path: r.URL.Path, rawPath: r.URL.RawPath, lean: lean}
	copy(e.inline[:], r.URL.Path)
	memo.hand = (memo.hand + 1) % len(memo.e)
	return e
}

// leanTarget is what a lean request carries from its match to its
// route: the match, the request it is for (set when its handler starts),
// and whether leanDispatch dispatched with it.
type leanTarget struct {
	m      *leanMatch
	req    *http.Request
	direct bool
}

// leanTargetOf is the lean route of the request w answers, nil for a
// writer of net/http's.
func leanTargetOf(w http.ResponseWriter) *leanTarget {
	switch lw := w.(type) {
	case *h1Writer:
		return &lw.c.route
	case *h2Writer:
		return &lw.st.route
	}
	return nil
}

// leanDispatch is the server's handler behind its gates: a lean request
// (HTTP/1.1 or HTTP/2) that match matched goes straight to its route's
// handler, with the pattern the mux would have set and the path values
// it would have found (for PathValue); anything else to next, as before.
// The request must be the very one the lean path built (a gate that
// rewrote it, like collapseSlashes, sends it to the mux), and next the
// mux that matched it.
type leanDispatch struct {
	next http.Handler
	mux  *http.ServeMux // next, if it is a mux; nil if not (tracing)
}

func newLeanDispatch(next http.Handler) leanDispatch {
	mux, _ := next.(*http.ServeMux)
	return leanDispatch{next: next, mux: mux}
}

func (d leanDispatch) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rt := leanTargetOf(w)
	if rt == nil || rt.m == nil || rt.req != r || rt.m.mux != d.mux || !rt.m.ok {
		d.next.ServeHTTP(w, r)
		return
	}
	m := rt.m
	// The values stay in the match, for PathValue: set in r, they are
	// a map per request (r.SetPathValue's, without the mux's pattern),
	// two allocations and 1.7 % of a compat reservation's CPU. So they
	// are set only for a route not known to read them with PathValue.
	r.Pattern = m.pattern
	if !m.route.readsPathValue.Load() {
		for i, n := range m.names {
			r.SetPathValue(n, m.vals[i])
		}
	}
	rt.direct = true
	m.h.ServeHTTP(w, r)
}

// PathValue is r.PathValue(name) for the handler of a lean route
// (HandleLean): a request the lean path dispatched straight to its route
// (leanDispatch) has its values in the match, and, once the route is
// seen reading them here, no longer in r. Any other request, served
// through the mux, has them in r. A route that reads one value with
// PathValue must read them all with it.
func PathValue(w http.ResponseWriter, r *http.Request, name string) string {
	if rt := leanTargetOf(w); rt != nil && rt.direct && rt.req == r {
		m := rt.m
		if !m.route.readsPathValue.Load() {
			m.route.readsPathValue.Store(true) // once: the flag is read by every request
		}
		for i, n := range m.names {
			if n == name {
				return m.vals[i]
			}
		}
		return ""
	}
	return r.PathValue(name)
}

// LeanPattern is the pattern mux matched r to, when the lean path
// matched it already (a gate in front of the mux asks without matching
// again); ok false otherwise.
func LeanPattern(w http.ResponseWriter, r *http.Request, mux *http.ServeMux) (pattern string, ok bool) {
	if rt := leanTargetOf(w); rt != nil && rt.m != nil && rt.req == r && rt.m.mux == mux {
		return rt.m.pattern, true
	}
	return "", false
}
