package bench

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// A crowd reaches an https:// server (`surge serve --tls-cert`) with
// every transport: the HTTP/2 ones over HTTP/2 by ALPN, the HTTP/1.1 one
// over HTTP/1.1, every request within TLS.
func TestCrowdOverTLS(t *testing.T) {
	for transport, wantMajor := range map[string]int{CrowdTransportXNet: 2, CrowdTransportNetHTTP: 2, CrowdTransportHTTP1: 1} {
		t.Run(transport, func(t *testing.T) {
			var clear, otherProto atomic.Int64
			next := newFakeTicketing().handler()
			ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.TLS == nil {
					clear.Add(1)
				}
				if r.ProtoMajor != wantMajor {
					otherProto.Add(1)
				}
				next.ServeHTTP(w, r)
			}))
			ts.EnableHTTP2 = true
			ts.StartTLS()
			defer ts.Close()
			cfg := ts.Client().Transport.(*http.Transport).TLSClientConfig
			s := runCrowd(t, CrowdConfig{BaseURL: ts.URL, TLS: &tls.Config{RootCAs: cfg.RootCAs}, Transport: transport, CheckSeats: true, rules: fastRules})
			if s.Errors != 0 || s.Reservations != 400 {
				t.Fatalf("%d errors in %d reservations", s.Errors, s.Reservations)
			}
			if clear.Load() != 0 || otherProto.Load() != 0 {
				t.Fatalf("%d requests in clear, %d not over HTTP/%d", clear.Load(), otherProto.Load(), wantMajor)
			}
		})
	}
}
