//lint:file-ignore SA1019 an h2c client other than net/http's, so the call reaches the lean HTTP/2 server as the crowd's does: x/net/http2's Transport (deprecated since x/net v0.5x, which OpenTelemetry's exporters need)

package auth

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/http2"

	"github.com/surge-run/surge/internal/api"
)

// A long-lived call counts against its token's limit while it waits for
// an in-flight slot too, even on a lean route of the lean HTTP/2 server,
// where a waiting request is parked and its handler returns: the gate
// must not see it end there.
func TestLongLivedCallParkedStillCountsOpen(t *testing.T) {
	const hang = 10 * time.Second
	reg := prometheus.NewRegistry()
	m := api.NewMetrics(reg)
	mux := http.NewServeMux()
	hold, held := make(chan struct{}), make(chan struct{})
	m.HandleLean(mux, "POST /hold", func(w http.ResponseWriter, r *http.Request) int {
		close(held)
		<-hold
		api.Write(w, http.StatusOK, false, []byte("held\n"))
		return http.StatusOK
	})
	m.HandleLean(mux, "POST /poll", func(w http.ResponseWriter, r *http.Request) int {
		api.Write(w, http.StatusOK, false, []byte("polled\n"))
		return http.StatusOK
	})
	routes := NewRoutes()
	need := Need{Workload: "ticketing", Role: Write}
	if err := errors.Join(routes.Add("POST /hold", Route{Need: need}),
		routes.Add("POST /poll", Route{Need: need, LongLived: true})); err != nil {
		t.Fatal(err)
	}
	tok, _ := NewToken()
	table, err := NewTable([]Entry{{Name: "t", Scopes: []Scope{{"ticketing", Write}}, Hash: Hash(tok)}}, "")
	if err != nil {
		t.Fatal(err)
	}
	g := NewGate(GateConfig{Table: table, Routes: routes, MaxOpen: 1,
		Route: func(_ http.ResponseWriter, r *http.Request) string { _, p := mux.Handler(r); return p }})
	s := api.NewServer("127.0.0.1:0", mux, api.Limits{Lean: m.Lean(), LeanH2: true, MaxInflight: 1, Gate: g.Wrap}, reg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	defer s.Close()
	hc := &http.Client{Timeout: hang, Transport: &http2.Transport{AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}}}
	post := func(path string) (int, error) {
		req, _ := http.NewRequest("POST", "http://"+ln.Addr().String()+path, strings.NewReader("x"))
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	go post("/hold")
	<-held
	first := make(chan int, 1)
	go func() { code, _ := post("/poll"); first <- code }()
	for deadline := time.Now().Add(hang); waiting(t, reg) != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first long-lived call never waited in the room")
		}
	}
	second := make(chan int, 1)
	go func() { code, _ := post("/poll"); second <- code }()
	for deadline := time.Now().Add(hang); ; time.Sleep(time.Millisecond) {
		select {
		case code := <-second:
			if code != http.StatusTooManyRequests {
				t.Errorf("a second long-lived call of a token at its limit of 1: %d, want 429", code)
			}
		default:
			if waiting(t, reg) == 2 {
				t.Errorf("a second long-lived call of a token at its limit of 1 was admitted to wait (its first, waiting, no longer counted)")
			} else if time.Now().Before(deadline) {
				continue
			} else {
				t.Errorf("the second long-lived call was neither refused nor queued")
			}
		}
		break
	}
	close(hold)
	if code := <-first; code != http.StatusOK {
		t.Errorf("the first long-lived call: %d, want 200", code)
	}
}

// waiting is the room's depth, from the server's metrics.
func waiting(t *testing.T, reg *prometheus.Registry) float64 {
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "surge_http_waiting_requests" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}
