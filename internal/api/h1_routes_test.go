package api

import (
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
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
	lean := m.Lean()
	methods := []string{"GET", "POST", "PUT"}
	hosts := []string{"localhost", "example.com", "example.com:8080"}
	paths := []string{"/v1/event/e1/reservation", "/v1/event/e2/reservation", "/v1/reservation/r1",
		"/v1/reservation/stats", "/v1/reservation/r%2F1", "/debug", "/debug/x", "/v2/reservations", "/v1/./reservation/r1"}
	rng := rand.New(rand.NewPCG(3, 4))
	var memo leanMemo
	for i := range 20000 {
		if i == 10000 {
			// A line answered before its route is marked is asked again
			// right after.
			r := httptest.NewRequest("POST", "/v2/reservations", nil)
			if lean.serves(r, &memo) {
				t.Fatal("POST /v2/reservations is lean before it is marked")
			}
			m.HandleLean(mux, "POST /v2/reservations", noop)
			if !lean.serves(r, &memo) {
				t.Fatal("POST /v2/reservations is not lean once marked")
			}
		}
		r := httptest.NewRequest(methods[rng.IntN(len(methods))], "http://x"+paths[rng.IntN(len(paths))], nil)
		r.Host = hosts[rng.IntN(len(hosts))]
		_, pat := mux.Handler(r)
		want := lean.marked.Load().set[pat]
		if got := lean.serves(r, &memo); got != want {
			t.Fatalf("request %d, %s %s%s: memo says lean=%v, the mux's pattern %q says %v",
				i, r.Method, r.Host, r.URL.Path, got, pat, want)
		}
	}
}

// TestLeanMemoKeepsARepeatedLine: a request line that repeats stays in
// the memo while another line never repeats (the compat flow's POST for
// one event between GETs of new ids).
func TestLeanMemoKeepsARepeatedLine(t *testing.T) {
	m, _ := compatLeanRoutes()
	lean := m.Lean()
	var memo leanMemo
	post := httptest.NewRequest("POST", "/v1/event/e1/reservation", nil)
	lean.serves(post, &memo)
	for i := range 10 {
		get := httptest.NewRequest("GET", "/v1/reservation/r"+string(rune('a'+i)), nil)
		if _, ok := memo.find(lean.marked.Load(), get); ok {
			t.Fatalf("GET %d was never asked yet is in the memo", i)
		}
		lean.serves(get, &memo)
		if _, ok := memo.find(lean.marked.Load(), post); !ok {
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
