package api

import (
	"bufio"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

// leanBindPatterns are the shapes LeanRoutes.Handler binds itself
// (direct) and the ones it leaves to the mux, beside routes that are not
// lean.
var leanBindPatterns = []struct {
	pattern string
	lean    bool
}{
	{"POST /v1/event/{id}/reservation", true},
	{"GET /v1/reservation/{id}", true},
	{"GET /v1/reservation/special", false},
	{"GET /pair/{x}/and/{id}", true},
	{"GET /pair/lit/and/{id}", false},
	{"DELETE /v2/reservations/{id}", true},
	{"GET /healthz", true},
	{"GET /tree/{rest...}", true},
	{"GET /end/{$}", true},
	{"GET /dir/", true},
}

func leanBindMux() (*http.ServeMux, *LeanRoutes) {
	lean := &LeanRoutes{}
	mux := http.NewServeMux()
	for _, p := range leanBindPatterns {
		mux.HandleFunc(p.pattern, func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "%q x=%q id=%q rest=%q", r.Pattern, r.PathValue("x"), r.PathValue("id"), r.PathValue("rest"))
		})
		if p.lean {
			lean.mark(mux, p.pattern)
		}
	}
	return mux, lean
}

// leanBindWriter is a ResponseWriter that carries a match, as the lean
// servers' do.
type leanBindWriter struct {
	*httptest.ResponseRecorder
	m leanMatch
}

func (w *leanBindWriter) leanMatched() *leanMatch { return &w.m }

// leanBindCompare serves the request in raw through Handler with the lean
// match made, and through the mux alone, and fails if the answers
// differ or if a direct lean route was matched again by the mux.
func leanBindCompare(t *testing.T, mux *http.ServeMux, lean *LeanRoutes, raw string) {
	read := func() *http.Request {
		r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
		if err != nil {
			return nil
		}
		return r
	}
	r1, r2 := read(), read()
	if r1 == nil {
		t.Skip()
	}
	w1 := &leanBindWriter{ResponseRecorder: httptest.NewRecorder()}
	matched := lean.match(r1, &w1.m)
	direct := w1.m.h != nil
	if direct {
		// bind must take it: the mux is not to match it a second time.
		cp := *r1 // the same URL, as the request that reaches Handler
		if _, ok := w1.m.bind(mux, &cp); !ok {
			t.Fatalf("%q: matched a direct lean route, but the match did not bind", raw)
		}
	}
	lean.Handler(mux).ServeHTTP(w1, r1)
	if w1.m != (leanMatch{}) {
		t.Fatalf("%q: the match outlived its request", raw)
	}
	w2 := httptest.NewRecorder()
	mux.ServeHTTP(w2, r2)
	if w1.Code != w2.Code || w1.Body.String() != w2.Body.String() || w1.Header().Get("Location") != w2.Header().Get("Location") {
		t.Fatalf("%q (lean %v, direct %v):\n lean %d %q\n mux  %d %q", raw, matched, direct, w1.Code, w1.Body, w2.Code, w2.Body)
	}
}

// TestLeanRoutesBindAsTheMux: a request that a lean server matched to a
// route is served by LeanRoutes.Handler exactly as the mux would serve
// it (Pattern and path values), without the mux matching it again.
func TestLeanRoutesBindAsTheMux(t *testing.T) {
	mux, lean := leanBindMux()
	for _, target := range []string{
		"POST /v1/event/e1/reservation", "POST /v1/event/a%2Fb/reservation", "GET /v1/event/e1/reservation",
		"GET /v1/reservation/0195", "GET /v1/reservation/special", "GET /v1/reservation/a%20b?x=1",
		"HEAD /v1/reservation/%E2%82%AC", "GET /v1/reservation/", "GET /v1/reservation/a/",
		"GET /pair/a/and/b", "GET /pair/lit/and/b", "GET /pair/%6Cit/and/b", "GET /pair/a%2F/and/%25",
		"GET /pair//and/b", "GET /pair/./and/b", "GET /pair/a/and/../b", "GET //pair/a/and/b",
		"DELETE /v2/reservations/x", "GET /healthz", "GET /healthz/", "GET /tree/a/b%2Fc", "GET /end/", "GET /dir/x/y",
	} {
		method, path, _ := strings.Cut(target, " ")
		t.Run(target, func(t *testing.T) {
			leanBindCompare(t, mux, lean, method+" "+path+" HTTP/1.1\r\nHost: a\r\n\r\n")
		})
	}
	for _, p := range []string{"POST /v1/event/{id}/reservation", "GET /healthz"} {
		if !lean.set[p].direct {
			t.Errorf("%s: not bound directly", p)
		}
	}
	for _, p := range []string{"GET /tree/{rest...}", "GET /end/{$}", "GET /dir/"} {
		if lean.set[p].direct {
			t.Errorf("%s: bound directly, a shape the binding does not model", p)
		}
	}
}

// FuzzLeanRoutesBind: for any request line, Handler with the lean match
// answers as the mux alone.
func FuzzLeanRoutesBind(f *testing.F) {
	for _, s := range []string{"GET /pair/a/and/b", "POST /v1/event/%zz/reservation", "GET /v1/reservation/%2e%2e", "HEAD /pair/%2F/and/%2f"} {
		f.Add(s)
	}
	mux, lean := leanBindMux()
	f.Fuzz(func(t *testing.T, line string) {
		if strings.ContainsAny(line, "\r\n") {
			t.Skip()
		}
		leanBindCompare(t, mux, lean, line+" HTTP/1.1\r\nHost: a\r\n\r\n")
	})
}

var hostField = regexp.MustCompile(`host=\S*`)

// TestH2LeanRoutesBindAsTheMux: over h2c, the lean server's requests to
// lean routes get the answers net/http's server gives through the mux.
func TestH2LeanRoutesBindAsTheMux(t *testing.T) {
	h, lean := h1TestMux()
	_, std := startServer(t, h, Limits{StandardConns: true}, nil)
	s, addr := startServer(t, h, leanH2(Limits{Lean: lean}), nil)
	for _, path := range []string{"/items/1", "/items/a%20b?q=1", "/items/a%2Fb", "/pair/a%20b/and/c%2Fd", "/pair/lit/and/1", "/pair/%E2%82%AC/and/%25", "/tree/a/b", "/pair/a/and/b/"} {
		for _, method := range []string{"GET", "HEAD", "DELETE"} {
			a := h2Do(t, xh2Client(), method, "http://"+std+path, nil, false)
			b := h2Do(t, xh2Client(), method, "http://"+addr+path, nil, false)
			if a.status != b.status || hostField.ReplaceAllString(string(a.body), "") != hostField.ReplaceAllString(string(b.body), "") {
				t.Errorf("%s %s:\n net/http %d %q\n lean     %d %q", method, path, a.status, a.body, b.status, b.body)
			}
		}
	}
	if s.h2.served.Load() == 0 {
		t.Fatal("the lean h2 server served nothing")
	}
}
