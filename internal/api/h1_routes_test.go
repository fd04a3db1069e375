package api

import (
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/surge-run/surge/internal/ids"
)

// TestLeanMemoAnswersAsTheMux: through any sequence of requests, serves
// with a connection's memo answers what the mux's own match says, also
// when routes are marked in between.
func TestLeanMemoAnswersAsTheMux(t *testing.T) {
	m, mux := compatLeanRoutes()
	noop := func(w http.ResponseWriter, r *http.Request) int { return 200 }
	m.Handle(mux, "GET /v1/reservation/stats", noop)
	m.Handle(mux, "GET example.com/v1/reservation/{id}", noop)
	m.Handle(mux, "/debug/", noop)
	m.Handle(mux, "DELETE /v1/reservation/{id}", noop)
	m.Handle(mux, "GET /v1/reservation/"+strings.Repeat("s", ids.Len), noop) // an id's length, not one
	m.Handle(mux, "GET /v1/reservation/{id}/{rest...}", noop)
	m.HandleLean(mux, "GET /v2/events/{id}", noop)
	m.HandleLean(mux, "GET /w/{a}/{b}/{c}/{d}/{id}", noop) // more values than an entry has room for
	m.Handle(mux, "/v2/events/", noop)
	lean := m.Lean()
	methods := []string{"GET", "POST", "PUT", "DELETE", "HEAD"}
	hosts := []string{"localhost", "example.com", "example.com:8080"}
	paths := []string{"/v1/event/e1/reservation", "/v1/event/e2/reservation", "/v1/reservation/r1",
		"/v1/reservation/stats", "/v1/reservation/r%2F1", "/debug", "/debug/x", "/v2/reservations", "/v1/./reservation/r1",
		// Longer than an entry's copy, differing before and after it.
		"/v1/event/" + strings.Repeat("e", 60) + "/reservation", "/v1/event/" + strings.Repeat("e", 59) + "f/reservation",
		"/v1/reservation/" + strings.Repeat("r", 60) + "1", "/v1/reservation/" + strings.Repeat("r", 60) + "2",
		"/v1/reservation/" + strings.Repeat("r", 47) + "1", "/v1/reservation/" + strings.Repeat("r", 47) + "2"}
	// Ids, which a request by a new one is matched by (leanMemo.byID):
	// in every place, escaped, upper case, or only shaped like one.
	rng := rand.New(rand.NewPCG(3, 4))
	for range 8 {
		var u ids.UUID
		for i := range u {
			u[i] = byte(rng.Uint32())
		}
		id := u.String()
		paths = append(paths, "/v1/reservation/"+id, "/v1/reservation/"+id, "/v1/reservation/"+strings.ToUpper(id),
			"/v1/reservation/%"+strconv.FormatInt(int64(id[0]), 16)+id[1:], "/v1/reservation/"+id+"/x", "/v1/reservation/"+id+"/",
			"/v1/event/"+id+"/reservation", "/v2/events/"+id, "/v2/events/x/"+id, "/v1//reservation/"+id, "/v1/./reservation/"+id,
			"/v1/reservation/"+strings.Repeat("z", 8)+id[8:], "/v1/reservation/"+strings.Repeat("s", ids.Len), "/v1/reservation/"+id[:35]+"/", "/v2/events/"+id+strings.Repeat("e", 30),
			"/w/1/2/3/4/"+id, "/w/1/2/3/5/"+id)
	}
	var memo leanMemo
	for i := range 20000 {
		if i == 10000 {
			// A line answered before its route is marked is asked again
			// right after.
			r := httptest.NewRequest("POST", "/v2/reservations", nil)
			if lean.match(r, &memo) != nil {
				t.Fatal("POST /v2/reservations is lean before it is marked")
			}
			m.HandleLean(mux, "POST /v2/reservations", noop)
			if lean.match(r, &memo) == nil {
				t.Fatal("POST /v2/reservations is not lean once marked")
			}
		}
		r := httptest.NewRequest(methods[rng.IntN(len(methods))], "http://x"+paths[rng.IntN(len(paths))], nil)
		r.Host = hosts[rng.IntN(len(hosts))]
		_, pat := mux.Handler(r)
		want := lean.marked.Load().set[pat] != nil
		got := lean.match(r, &memo)
		if (got != nil) != want {
			t.Fatalf("request %d, %s %s%s: memo says lean=%v, the mux's pattern %q says %v",
				i, r.Method, r.Host, r.URL.Path, got != nil, pat, want)
		}
		// The match the dispatch uses is this request's, not a
		// remembered one's.
		if names, vals, ok := pathValues(pat, r.URL.EscapedPath(), nil, nil); got != nil &&
			(got.pattern != pat || got.ok != ok || !slices.Equal(got.names, names) || !slices.Equal(got.vals, vals)) {
			t.Fatalf("request %d, %s %s%s: memo matched %q %q=%q, the mux %q %q=%q",
				i, r.Method, r.Host, r.URL.Path, got.pattern, got.names, got.vals, pat, names, vals)
		}
	}
}

// TestLeanMemoMatchesANewIDAsTheLast: a GET by a new id each time, the
// compat flow's, is matched by the memo (leanMemo.byID), not the mux, and
// a pattern with an id as a literal, which would break that, is refused.
func TestLeanMemoMatchesANewIDAsTheLast(t *testing.T) {
	m, _ := compatLeanRoutes()
	lean := m.Lean()
	var memo leanMemo
	get := func(id string) *leanMatch {
		return lean.match(httptest.NewRequest("GET", "/v1/reservation/"+id, nil), &memo)
	}
	get("0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9")
	id := "aa1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"
	if memo.byID(lean.marked.Load(), httptest.NewRequest("GET", "/v1/reservation/"+id, nil)) == nil {
		t.Fatal("a GET by a new id was not matched as the last")
	}
	if mt := get(id); mt == nil || mt.pattern != "GET /v1/reservation/{id}" || !mt.ok || !slices.Equal(mt.vals, []string{id}) {
		t.Fatalf("GET by a new id matched %+v", mt)
	}
	defer func() {
		if recover() == nil {
			t.Error("a pattern with an id as a literal segment was registered")
		}
	}()
	m.Handle(http.NewServeMux(), "GET /v1/reservation/"+id, func(http.ResponseWriter, *http.Request) int { return 200 })
}

// TestLeanMemoKeepsARepeatedLine: a request line that repeats stays in
// the memo while another line never repeats (the compat flow's POST for
// one event between GETs of new ids).
func TestLeanMemoKeepsARepeatedLine(t *testing.T) {
	m, _ := compatLeanRoutes()
	lean := m.Lean()
	var memo leanMemo
	post := httptest.NewRequest("POST", "/v1/event/e1/reservation", nil)
	lean.match(post, &memo)
	for i := range 10 {
		get := httptest.NewRequest("GET", "/v1/reservation/r"+string(rune('a'+i)), nil)
		if memo.find(lean.marked.Load(), get) != nil {
			t.Fatalf("GET %d was never asked yet is in the memo", i)
		}
		lean.match(get, &memo)
		if memo.find(lean.marked.Load(), post) == nil {
			t.Fatalf("the repeated POST fell out of the memo after GET %d", i)
		}
	}
}

// compatLeanRoutes is a mux with the ticketing compat routes marked lean.
func compatLeanRoutes() (*Metrics, *http.ServeMux) {
	m := NewMetrics(prometheus.NewRegistry())
	mux := http.NewServeMux()
	noop := func(w http.ResponseWriter, r *http.Request) int { return 200 }
	m.HandleLean(mux, "POST /v1/event/{id}/reservation", noop)
	m.HandleLean(mux, "GET /v1/reservation/{id}", noop)
	return m, mux
}

// TestPathValuesAsTheMux: for random paths, the wildcard values
// pathValues finds for the pattern the mux matched are the values the
// mux gives the handler, and it finds them for every pattern the lean
// routes use (a path of whole-segment wildcards) on every path the mux
// does not clean (and redirect).
func TestPathValuesAsTheMux(t *testing.T) {
	patterns := []string{"GET /a/{x}", "GET /a/{x}/b/{y}", "POST /v1/event/{id}/reservation",
		"GET  /v1/reservation/{id}", "GET /v1/reservation/stats", "/plain/path", "GET /tree/{rest...}",
		"GET /lit/{$}", "/sub/{x}/", "example.com/h/{x}"}
	mux := http.NewServeMux()
	var seen *http.Request
	for _, p := range patterns {
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) { seen = r })
	}
	wildcard := regexp.MustCompile(`\{([^}]*)\}`)
	segs := []string{"a", "b", "x%2Fy", "%20", "%41", "é", "", "v1", "event", "reservation", "stats",
		"e1", "tree", "lit", "sub", "h", "plain", "path", "id", ".", "..", ".x"}
	rng := rand.New(rand.NewPCG(5, 6))
	found := 0
	for range 50000 {
		path := ""
		if rng.IntN(2) == 0 {
			// A pattern's path, its wildcards filled in.
			_, pp, _ := strings.Cut(patterns[rng.IntN(len(patterns))], "/")
			path = "/" + wildcard.ReplaceAllStringFunc(pp, func(string) string { return segs[rng.IntN(len(segs))] })
		} else {
			for range 1 + rng.IntN(5) {
				path += "/" + segs[rng.IntN(len(segs))]
			}
		}
		r := httptest.NewRequest([]string{"GET", "POST"}[rng.IntN(2)], "http://x"+path, nil)
		r.Host = []string{"x", "example.com"}[rng.IntN(2)]
		_, pat := mux.Handler(r)
		if pat == "" {
			continue
		}
		names, vals, ok := pathValues(pat, r.URL.EscapedPath(), nil, nil)
		esc := r.URL.EscapedPath()
		simple := !strings.Contains(pat, "...") && !strings.Contains(pat, "$") &&
			!strings.HasSuffix(pat, "/") && !strings.Contains(pat, "example.com") &&
			!strings.Contains(esc, "//") && !strings.Contains(esc, "/.")
		if simple != ok {
			t.Fatalf("%s %s (escaped %s): pathValues ok=%v, want %v", pat, path, r.URL.EscapedPath(), ok, simple)
		}
		if !ok {
			continue
		}
		seen = nil
		mux.ServeHTTP(httptest.NewRecorder(), r)
		want := wildcard.FindAllStringSubmatch(pat, -1)
		if seen == nil || len(names) != len(want) {
			t.Fatalf("%s %s: names %q, pattern has %d wildcards", pat, path, names, len(want))
		}
		for i, n := range names {
			if n != want[i][1] || vals[i] != seen.PathValue(n) {
				t.Fatalf("%s %s: %s=%q, the mux says %s=%q", pat, path, n, vals[i], want[i][1], seen.PathValue(want[i][1]))
			}
		}
		found += len(names)
	}
	if found < 2000 {
		t.Fatalf("only %d values compared", found)
	}
}

// TestLeanDispatchUsesTheMatch: a lean request with its match goes to the
// match's handler with the mux's pattern and values, without the mux; a
// request that is not the one matched (rewritten by a gate), or a match
// on another mux, goes to the mux.
func TestLeanDispatchUsesTheMatch(t *testing.T) {
	mux := http.NewServeMux()
	var viaMux, viaMatch int
	mux.HandleFunc("GET /v1/reservation/{id}", func(w http.ResponseWriter, r *http.Request) {
		viaMux++
		if PathValue(w, r, "id") != "r/1" {
			t.Errorf("through the mux, id %q", PathValue(w, r, "id"))
		}
	})
	direct := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		viaMatch++
		if r.Pattern != "GET /v1/reservation/{id}" || PathValue(w, r, "id") != "r/1" || PathValue(w, r, "x") != "" {
			t.Errorf("dispatched with pattern %q, id %q, x %q", r.Pattern, PathValue(w, r, "id"), PathValue(w, r, "x"))
		}
	})
	r := httptest.NewRequest("GET", "/v1/reservation/r%2F1", nil)
	names, vals, ok := pathValues("GET /v1/reservation/{id}", r.URL.EscapedPath(), nil, nil)
	c := &h1Conn{route: leanTarget{m: &leanMatch{mux: mux, h: direct, pattern: "GET /v1/reservation/{id}", route: &leanRouteInfo{}, names: names, vals: vals, ok: ok}, req: r}}
	d := newLeanDispatch(mux)
	d.ServeHTTP(&h1Writer{c: c}, r)
	if viaMatch != 1 || viaMux != 0 {
		t.Fatalf("the matched request went %d times to the match, %d to the mux; want 1, 0", viaMatch, viaMux)
	}
	d.ServeHTTP(&h1Writer{c: c}, r.Clone(r.Context()))
	c.route.m.mux = http.NewServeMux()
	d.ServeHTTP(&h1Writer{c: c}, r)
	d.ServeHTTP(httptest.NewRecorder(), r)
	if viaMatch != 1 || viaMux != 3 {
		t.Fatalf("unmatched requests went %d times to the match, %d to the mux; want 1, 3", viaMatch-1, viaMux)
	}
}

// TestLeanPatternIsTheMatchs: a gate asking for the pattern of the
// request the lean path matched gets the match's; of any other request,
// or for another mux, or through net/http's writer, nothing.
func TestLeanPatternIsTheMatchs(t *testing.T) {
	mux := http.NewServeMux()
	r := httptest.NewRequest("GET", "/v1/reservation/r1", nil)
	c := &h1Conn{route: leanTarget{m: &leanMatch{mux: mux, pattern: "GET /v1/reservation/{id}"}, req: r}}
	w := &h1Writer{c: c}
	if p, ok := LeanPattern(w, r, mux); !ok || p != "GET /v1/reservation/{id}" {
		t.Fatalf("the matched request: %q, %v", p, ok)
	}
	for name, ask := range map[string]func() (string, bool){
		"another request": func() (string, bool) { return LeanPattern(w, r.Clone(r.Context()), mux) },
		"another mux":     func() (string, bool) { return LeanPattern(w, r, http.NewServeMux()) },
		"net/http's writer": func() (string, bool) {
			return LeanPattern(httptest.NewRecorder(), r, mux)
		},
		"no match": func() (string, bool) { return LeanPattern(&h1Writer{c: &h1Conn{route: leanTarget{req: r}}}, r, mux) },
	} {
		if p, ok := ask(); ok || p != "" {
			t.Errorf("%s: %q, %v; want nothing", name, p, ok)
		}
	}
}

// TestSharedMatchOutlivesItsEntry: the streams of one request line share
// one match, which keeps its route and values after the memo has moved
// on to other lines, and is not the entry's own (which the next match
// of a new line rewrites).
func TestSharedMatchOutlivesItsEntry(t *testing.T) {
	m, _ := compatLeanRoutes()
	lean := m.Lean()
	var memo leanMemo
	get := func(id string) *http.Request { return httptest.NewRequest("GET", "/v1/reservation/"+id, nil) }
	a := lean.sharedMatch(get("a%2F1"), &memo)
	if a == nil || lean.sharedMatch(get("a%2F1"), &memo) != a {
		t.Fatal("two streams of one line do not share its match")
	}
	if own := lean.match(get("a%2F1"), &memo); own == a {
		t.Fatal("the shared match is the memo entry's own")
	}
	for _, id := range []string{"b", "c", "d", "e"} {
		if lean.sharedMatch(get(id), &memo) == a {
			t.Fatalf("line %s got the match of a", id)
		}
	}
	if a.pattern != "GET /v1/reservation/{id}" || !a.ok || len(a.vals) != 1 || a.vals[0] != "a/1" || a.names[0] != "id" {
		t.Fatalf("after the memo moved on, the shared match is %q %q=%q ok=%v", a.pattern, a.names, a.vals, a.ok)
	}
	if lean.sharedMatch(httptest.NewRequest("GET", "/v2/other", nil), &memo) != nil {
		t.Fatal("a line of no lean route has a match")
	}
}

// FuzzPathValues: for any path a request can carry, where the mux sends
// it to a pattern pathValues takes, the values are the mux's.
func FuzzPathValues(f *testing.F) {
	patterns := []string{"GET /a/{x}", "GET /a/{x}/b/{y}", "POST /v1/event/{id}/reservation", "GET /v1/reservation/{id}",
		"GET /v1/reservation/stats", "GET /tree/{rest...}", "/sub/{x}/"}
	mux := http.NewServeMux()
	var seen *http.Request
	for _, p := range patterns {
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) { seen = r })
	}
	for _, s := range []string{"/a/1", "/a/x%2Fy/b/%20", "/v1/event/e1/reservation", "/v1/reservation/r%2F1", "/v1/reservation/stats",
		"/a/./b", "/a//b", "/a/%zz", "/tree/a/b", "/sub/x/y"} {
		f.Add("GET", s)
	}
	f.Add("POST", "/v1/event/%C3%A9/reservation")
	f.Fuzz(func(t *testing.T, method, target string) {
		r, err := http.NewRequest(method, "http://x"+target, nil)
		if err != nil || r.URL.Host != "x" || !strings.HasPrefix(r.URL.Path, "/") {
			return // no request a server would route
		}
		_, pat := mux.Handler(r)
		if pat == "" {
			return
		}
		names, vals, ok := pathValues(pat, r.URL.EscapedPath(), nil, nil)
		if !ok {
			return
		}
		seen = nil
		mux.ServeHTTP(httptest.NewRecorder(), r)
		if seen == nil {
			t.Fatalf("%s %s: pathValues took %q, but the mux did not serve it", method, target, pat)
		}
		for i, n := range names {
			if seen.PathValue(n) != vals[i] {
				t.Fatalf("%s %s (%q): %s=%q, the mux says %q", method, target, pat, n, vals[i], seen.PathValue(n))
			}
		}
	})
}

// TestLeanRoutesGetValuesEitherWay: over the lean paths, a lean route
// that reads r.PathValue gets its values on every request, and one that
// reads PathValue gets them too, without r holding them once the route
// is known to read them so.
func TestLeanRoutesGetValuesEitherWay(t *testing.T) {
	mux := http.NewServeMux()
	m := NewMetrics(prometheus.NewRegistry())
	m.HandleLean(mux, "GET /old/{id}", func(w http.ResponseWriter, r *http.Request) int {
		io.WriteString(w, r.PathValue("id"))
		return 200
	})
	m.HandleLean(mux, "GET /new/{id}", func(w http.ResponseWriter, r *http.Request) int {
		io.WriteString(w, PathValue(w, r, "id")+"|"+r.PathValue("id"))
		return 200
	})
	for _, mode := range []string{"http1", "h2c"} {
		t.Run(mode, func(t *testing.T) {
			lim, hc := Limits{Lean: m.Lean()}, http.DefaultClient
			if mode == "h2c" {
				lim, hc = leanH2(lim), xh2Client()
			}
			_, addr := startServer(t, mux, lim, nil)
			get := func(path string) string {
				resp, err := hc.Get("http://" + addr + path)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return string(b)
			}
			for i := range 3 {
				if got := get("/old/a%2Fb"); got != "a/b" {
					t.Errorf("request %d to a route reading r.PathValue: %q", i, got)
				}
				got := get("/new/x" + strconv.Itoa(i))
				if v, inR, _ := strings.Cut(got, "|"); v != "x"+strconv.Itoa(i) || i > 0 && inR != "" {
					t.Errorf("request %d to a route reading PathValue: %q", i, got)
				}
			}
		})
	}
}
