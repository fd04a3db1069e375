package api

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func getJSONError(t *testing.T, c *http.Client, method, url string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v (the connection was dropped instead of answered)", method, url, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var e struct{ Error string }
	if resp.Header.Get("Content-Type") != "application/json" || json.Unmarshal(b, &e) != nil || e.Error == "" {
		t.Fatalf("%s %s: %d %q is not a JSON error", method, url, resp.StatusCode, b)
	}
	return resp.StatusCode, resp.Header, e.Error
}

// TestHandlerPanicIsAnswered: a panicking handler must still answer (500,
// JSON) on a connection that stays usable, with or without metrics.
func TestHandlerPanicIsAnswered(t *testing.T) {
	reg := prometheus.NewRegistry()
	for _, m := range []*Metrics{NewMetrics(reg), nil} {
		mux := http.NewServeMux()
		m.Handle(mux, "GET /boom", func(w http.ResponseWriter, r *http.Request) int {
			var s []byte
			return int(s[r.ContentLength+5]) // index out of range
		})
		m.Handle(mux, "GET /ok", func(w http.ResponseWriter, r *http.Request) int {
			Write(w, 200, false, []byte("ok"))
			return 200
		})
		srv := httptest.NewServer(mux)
		srv.Config.ErrorLog = nil
		c := srv.Client()
		for range 3 {
			if st, _, msg := getJSONError(t, c, "GET", srv.URL+"/boom"); st != 500 || !strings.Contains(msg, "internal error") {
				t.Fatalf("panic answered %d %q", st, msg)
			}
		}
		if r, err := c.Get(srv.URL + "/ok"); err != nil || r.StatusCode != 200 {
			t.Fatalf("after panics: %v %v", r, err)
		}
		srv.Close()
		if m != nil {
			if got := counterValue(m.panics.WithLabelValues("GET /boom")); got != 3 {
				t.Errorf("surge_http_panics_total = %v, want 3", got)
			}
			if got := requestsTotal(t, reg, "GET /boom", "500"); got != 3 {
				t.Errorf("requests{code=500} = %v, want 3", got)
			}
		}
	}
}

// TestFallbackIsJSON: a path no route has gets a JSON 404, a route with
// the wrong method a JSON 405 with Allow; installing twice is harmless.
func TestFallbackIsJSON(t *testing.T) {
	mux := http.NewServeMux()
	m := NewMetrics(prometheus.NewRegistry())
	ok := func(w http.ResponseWriter, r *http.Request) int { Write(w, 200, false, nil); return 200 }
	m.Handle(mux, "GET /things/{id}", ok)
	m.Handle(mux, "DELETE /things/{id}", ok)
	m.HandleFallback(mux)
	m.HandleFallback(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c := srv.Client()
	if st, _, msg := getJSONError(t, c, "GET", srv.URL+"/nothing/"+strings.Repeat("x", 5000)); st != 404 || len(msg) > 300 {
		t.Errorf("unknown path: %d %q", st, msg)
	}
	st, h, msg := getJSONError(t, c, "POST", srv.URL+"/things/1")
	if st != 405 || h.Get("Allow") != "GET, HEAD, DELETE" || !strings.Contains(msg, "GET, HEAD, DELETE") {
		t.Errorf("wrong method: %d Allow %q %q", st, h.Get("Allow"), msg)
	}
	if r, err := c.Get(srv.URL + "/things/1"); err != nil || r.StatusCode != 200 {
		t.Errorf("the route itself: %v %v", r, err)
	}
}

func counterValue(c prometheus.Counter) float64 {
	var d dto.Metric
	c.Write(&d)
	return d.GetCounter().GetValue()
}
