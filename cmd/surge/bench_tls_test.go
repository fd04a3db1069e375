package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/surge-run/surge/internal/bench"
	"github.com/surge-run/surge/internal/testcerts"
)

// The ticketing spike against a server the bench starts with
// --serve-flag=--tls-cert/--tls-key: every reservation over HTTP/2 and
// TLS, trusting --ca-file, and the kill -9 and restart timed over TLS.
func TestBenchTicketingStartedServerOverTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the server")
	}
	bin := buildSurge(t)
	ca := testcerts.NewCA(t, "bench")
	pair := ca.Server(t)
	rep, b, out := runTicketingBench(t, context.Background(), "--flow", "native", "--baseline=false", "-n", "300", "--serve-exe", bin,
		"--serve-flag=--tls-cert="+pair.CertFile, "--serve-flag", "--tls-key="+pair.KeyFile, "--ca-file", ca.File)
	if !rep.OK || len(rep.Flows) != 1 {
		t.Fatalf("report %s\n%s", b, out)
	}
	f := rep.Flows[0]
	if f.Server == nil || f.Server.Reservations != 300 || f.Server.Errors != 0 || f.Restart == nil || f.Restart.Error != "" || f.Restart.StopError != "" {
		t.Fatalf("flow %s\n%s", b, out)
	}
}

// The commerce mix against an https:// --target: HTTP/2 over TLS
// trusting --ca-file, the token on every request.
func TestBenchCommerceTargetOverTLS(t *testing.T) {
	var plain, noToken atomic.Int64
	null := bench.NullHandler()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || r.ProtoMajor != 2 {
			plain.Add(1)
		}
		if r.Header.Get("Authorization") != "Bearer surge_bench" {
			noToken.Add(1)
		}
		null.ServeHTTP(w, r)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	testcerts.WriteCert(t, caFile, srv.Certificate().Raw)
	cmd := newBenchCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"commerce", "--target", srv.URL, "--baseline=false", "--levels", "100", "--duration", "300ms",
		"--clients", "1", "--ca-file", caFile, "--token", "surge_bench"})
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if plain.Load() != 0 || noToken.Load() != 0 {
		t.Errorf("%d requests not HTTP/2 over TLS, %d without the token", plain.Load(), noToken.Load())
	}
}
