package main

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/surge-run/surge/client/jobclient"
	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/clientconn"
	"github.com/surge-run/surge/internal/server"
	"github.com/surge-run/surge/internal/testcerts"
)

// serveTLSInProcess runs the real server over TLS with a certificate ca
// signed, on a free port for one test; it returns the https:// URL.
func serveTLSInProcess(t *testing.T, ca *testcerts.CA) string {
	t.Helper()
	pair := ca.Server(t)
	ctx, stop := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	errc := make(chan error, 1)
	cfg := server.Config{Addr: "127.0.0.1:0", DataDir: t.TempDir(), Partitions: 2, Ready: ready, MemoryLimit: -1,
		Logger: slog.New(slog.DiscardHandler), TLS: api.TLSFiles{Cert: pair.CertFile, Key: pair.KeyFile}}
	go func() { errc <- server.Run(ctx, cfg) }()
	t.Cleanup(func() {
		stop()
		if err := <-errc; err != nil {
			t.Errorf("server.Run: %v", err)
		}
	})
	select {
	case addr := <-ready:
		return "https://" + addr
	case err := <-errc:
		errc <- err
		t.Fatal(err)
	case <-time.After(30 * time.Second):
		t.Fatal("server did not start")
	}
	return ""
}

// surge ctl and the worker's client reach a TLS server at an https://
// URL, trusting --ca-file; without it the server's certificate is
// refused, and --ca-file on an http:// URL or a file that is no CA is a
// usage error naming the file.
func TestClientsOverTLS(t *testing.T) {
	ca := testcerts.NewCA(t, "test")
	base := serveTLSInProcess(t, ca)
	out := ok(t, base, nil, "queue", "create", "mail", "--ca-file", ca.File)
	if !hasRow(out, "mail") {
		t.Errorf("queue create over TLS:\n%s", out)
	}
	if r := runCtl(t, base, nil, "queue", "list"); r.status != 1 || !strings.Contains(r.errMsg, "certificate") {
		t.Errorf("without --ca-file: exit %d, %s; want exit 1 and a certificate error", r.status, r.errMsg)
	}
	if r := runCtl(t, "http://127.0.0.1:1", nil, "queue", "list", "--ca-file", ca.File); r.status != 2 || !strings.Contains(r.errMsg, ca.File) {
		t.Errorf("--ca-file with http://: exit %d, %s; want a usage error naming the file", r.status, r.errMsg)
	}
	notCA := t.TempDir() + "/not-ca.pem"
	os.WriteFile(notCA, []byte("hello"), 0o600)
	if r := runCtl(t, base, nil, "queue", "list", "--ca-file", notCA); r.status != 2 || !strings.Contains(r.errMsg, notCA) {
		t.Errorf("--ca-file of no certificate: exit %d, %s; want a usage error naming the file", r.status, r.errMsg)
	}

	opts, err := workerClientOptions(base, clientconn.Options{CAFile: ca.File})
	if err != nil {
		t.Fatal(err)
	}
	c := jobclient.New(base, opts...)
	_, _, _ = runCommandWorker(t, c, jobclient.WorkerConfig{ID: "tls", Concurrency: 2})
	id := submitCommand(t, c, jobclient.SubmitOptions{}, "echo", "over tls")
	if job := waitStatus(t, c, id, jobclient.StatusDone); string(job.Result) != "over tls\n" {
		t.Errorf("job over TLS: result %q", job.Result)
	}
	if _, err := workerClientOptions("http://127.0.0.1:1", clientconn.Options{CAFile: ca.File}); err == nil || exitStatus(err) != 2 {
		t.Errorf("worker --ca-file with http://: %v, want a usage error", err)
	}
}

// --token (and SURGE_TOKEN) goes out as Authorization: Bearer on every
// call of surge ctl, over h2c and over TLS.
func TestCtlSendsToken(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		http.Error(w, "no", http.StatusUnauthorized)
	})
	srv := httptest.NewUnstartedServer(h)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	caFile := t.TempDir() + "/ca.pem"
	testcerts.WriteCert(t, caFile, srv.Certificate().Raw)
	runCtl(t, srv.URL, nil, "queue", "list", "--ca-file", caFile, "--token", "surge_flag")
	t.Setenv("SURGE_TOKEN", "surge_env")
	runCtl(t, srv.URL, nil, "queue", "list", "--ca-file", caFile)
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || seen[0] != "Bearer surge_flag" || seen[1] != "Bearer surge_env" {
		t.Errorf("Authorization headers %q, want the flag's then SURGE_TOKEN's", seen)
	}
}

// The TLS flags of surge serve come from their SURGE_* variables unless
// given on the command line.
func TestServeTLSFlagsFromEnv(t *testing.T) {
	t.Setenv("SURGE_TLS_CERT", "/env/cert.pem")
	t.Setenv("SURGE_TLS_KEY", "/env/key.pem")
	t.Setenv("SURGE_TLS_CLIENT_CA", "/env/ca.pem")
	cmd := newServeCmd()
	if err := cmd.Flags().Parse([]string{"--tls-key", "/flag/key.pem"}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"tls-cert": "/env/cert.pem", "tls-key": "/flag/key.pem", "tls-client-ca": "/env/ca.pem"} {
		if got := cmd.Flags().Lookup(name).Value.String(); got != want {
			t.Errorf("--%s = %q, want %q", name, got, want)
		}
	}
}
