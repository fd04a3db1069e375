package jobclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/surge-run/surge/internal/jqpb"
	"github.com/surge-run/surge/internal/jqpb/jqpbconnect"
)

// headerLog records the Authorization header and protocol of every
// request by path.
type headerLog struct {
	mu   sync.Mutex
	seen map[string]string
}

func (l *headerLog) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		l.seen[r.URL.Path] = r.Proto + " " + r.Header.Get("Authorization")
		l.mu.Unlock()
		h.ServeHTTP(w, r)
	})
}

func (l *headerLog) get(path string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seen[path]
}

// An https:// URL gets HTTP/2 over TLS, trusting WithTLSConfig's CAs, and
// WithToken's bearer token goes on unary calls and on streams.
func TestHTTPSAndTokenOnCallsAndStreams(t *testing.T) {
	log := &headerLog{seen: map[string]string{}}
	mux := http.NewServeMux()
	mux.Handle(jqpbconnect.NewJobServiceHandler(jqpbconnect.UnimplementedJobServiceHandler{}))
	mux.Handle(jqpbconnect.NewWorkerServiceHandler(jqpbconnect.UnimplementedWorkerServiceHandler{}))
	srv := httptest.NewUnstartedServer(log.wrap(mux))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	c := New(srv.URL, WithTLSConfig(&tls.Config{RootCAs: roots}), WithToken("surge_secret"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	if _, err := c.Submit(ctx, "q", nil, SubmitOptions{}); connect.CodeOf(err) != connect.CodeUnimplemented {
		t.Fatalf("Submit: %v, want the server's UNIMPLEMENTED", err)
	}
	st, err := c.workers.StreamJobs(ctx, connect.NewRequest(&jqpb.StreamJobsRequest{WorkerId: "w"}))
	if err != nil {
		t.Fatal(err)
	}
	for st.Receive() {
	}
	st.Close()
	want := "HTTP/2.0 Bearer surge_secret"
	for _, path := range []string{jqpbconnect.JobServiceSubmitJobProcedure, jqpbconnect.WorkerServiceStreamJobsProcedure} {
		if got := log.get(path); got != want {
			t.Errorf("%s: %q, want %q", path, got, want)
		}
	}
	// Without the CA, the server's certificate is refused.
	if _, err := New(srv.URL).Submit(ctx, "q", nil, SubmitOptions{}); connect.CodeOf(err) == connect.CodeUnimplemented {
		t.Error("a client without the CA reached the server")
	}
}
