package server

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"

	"github.com/surge-run/surge/client/jobclient"
	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/testcerts"
)

// serveTLSForTest is serveForTest over TLS with a certificate ca signed;
// it returns the https:// base URL.
func serveTLSForTest(t *testing.T, cfg Config, ca *testcerts.CA) string {
	t.Helper()
	if cfg.TLS.Cert == "" {
		pair := ca.Server(t)
		cfg.TLS.Cert, cfg.TLS.Key = pair.CertFile, pair.KeyFile
	}
	return "https://" + strings.TrimPrefix(serveForTest(t, cfg), "http://")
}

func httpsClient(ca *testcerts.CA, h2 bool) *http.Client {
	p := new(http.Protocols)
	p.SetHTTP2(h2)
	p.SetHTTP1(!h2)
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Protocols: p, TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
}

// The real server with --tls-cert serves its HTTP API over HTTP/1.1 and
// HTTP/2, and gRPC (the jobs API through the Go client, the health
// service), all over TLS on its one port.
func TestTLSServesHTTPAndGRPC(t *testing.T) {
	ca := testcerts.NewCA(t, "test")
	base := serveTLSForTest(t, Config{}, ca)
	for h2, proto := range map[bool]string{false: "HTTP/1.1", true: "HTTP/2.0"} {
		resp, err := httpsClient(ca, h2).Post(base+"/v1/event", "application/json", strings.NewReader(`{"eventName":"tls","artist":"x","areas":[{"areaId":"A","price":1,"rowCount":2,"colCount":2}]}`))
		if err != nil {
			t.Fatalf("%s: %v", proto, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.Proto != proto || resp.TLS == nil || resp.StatusCode >= 300 {
			t.Errorf("POST /v1/event over %s: %s %s %s", proto, resp.Proto, resp.Status, body)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	health := grpchealth.NewClient(httpsClient(ca, true), base, connect.WithGRPC())
	if res, err := health.Check(ctx, &grpchealth.CheckRequest{}); err != nil || res.Status != grpchealth.StatusServing {
		t.Errorf("gRPC health over TLS: %v, %v", res, err)
	}
	jc := jobclient.New(base, jobclient.WithTLSConfig(&tls.Config{RootCAs: ca.Pool()}))
	id, err := jc.Submit(ctx, "default", []byte(`{"command":["true"]}`), jobclient.SubmitOptions{})
	if err != nil {
		t.Fatalf("SubmitJob over TLS: %v", err)
	}
	if job, err := jc.Get(ctx, id); err != nil || job.ID != id {
		t.Errorf("GetJobStatus over TLS: %+v, %v", job, err)
	}
	// The Go client refuses a server its CAs did not sign.
	if _, err := jobclient.New(base).Submit(ctx, "default", []byte(`{}`), jobclient.SubmitOptions{}); err == nil {
		t.Error("a client trusting only the system's CAs accepted the test CA's certificate")
	}
}

// A certificate file that does not load stops the start with an error
// naming it, before anything is opened.
func TestTLSBadCertFileAtStart(t *testing.T) {
	ca := testcerts.NewCA(t, "test")
	pair := ca.Server(t)
	bad := t.TempDir() + "/bad.pem"
	for _, files := range []api.TLSFiles{
		{Cert: bad, Key: pair.KeyFile},
		{Cert: pair.CertFile, Key: bad},
		{Cert: pair.CertFile, Key: pair.KeyFile, ClientCA: bad},
	} {
		dir := t.TempDir()
		_, err := New(context.Background(), Config{Addr: "127.0.0.1:0", DataDir: dir, TLS: files, Logger: slog.New(slog.DiscardHandler)})
		if err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("%+v: %v, want an error naming %s", files, err, bad)
		}
	}
	// A cluster node checks the CA it trusts for the other nodes at once.
	_, err := New(context.Background(), Config{Addr: "127.0.0.1:0", TLS: api.TLSFiles{Cert: pair.CertFile, Key: pair.KeyFile},
		Cluster: ClusterConfig{Kafka: "127.0.0.1:1", Cluster: "c", CA: bad}, Logger: slog.New(slog.DiscardHandler)})
	if err == nil || !strings.Contains(err.Error(), "--cluster-ca "+bad) {
		t.Errorf("TLS on a cluster node with a bad --cluster-ca: %v, want an error naming it", err)
	}
}

// SIGHUP reloads the certificate of a TLS server.
func TestTLSReloadOnSIGHUP(t *testing.T) {
	ca := testcerts.NewCA(t, "test")
	first, second := ca.Server(t), ca.Server(t)
	dir := t.TempDir()
	cfg := Config{TLS: api.TLSFiles{Cert: dir + "/cert.pem", Key: dir + "/key.pem"}}
	first.Install(t, cfg.TLS.Cert, cfg.TLS.Key)
	var logs syncLog
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	base := serveTLSForTest(t, cfg, ca)
	addr := strings.TrimPrefix(base, "https://")
	second.Install(t, cfg.TLS.Cert, cfg.TLS.Key)
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(logs.String(), "TLS certificate reloaded") {
		if time.Now().After(deadline) {
			t.Fatalf("no reload logged 30 s after SIGHUP:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := c.ConnectionState().PeerCertificates[0].SerialNumber; got.Cmp(second.Serial) != 0 {
		t.Errorf("serial %v served after SIGHUP, want the new %v", got, second.Serial)
	}
	if !strings.Contains(logs.String(), "SIGHUP") {
		t.Errorf("the reload was not SIGHUP's:\n%s", logs.String())
	}
}

// syncLog is a log output tests read while the server writes to it.
type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
