package bench

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpMaxBody bounds one export request the receiver reads; the SDK's
// batches (512 spans by default) are far below it.
const otlpMaxBody = 64 << 20

// otlpShutdownTimeout bounds how long closing the receiver waits for an
// export in progress.
const otlpShutdownTimeout = 5 * time.Second

// otlpReceiver is the OTLP/HTTP trace receiver --trace-cost points the
// traced servers at: it decodes each export as a collector would (the
// decoding's CPU is the bench's, not the server's) and counts spans.
type otlpReceiver struct {
	srv      *http.Server
	endpoint string // http://127.0.0.1:PORT, as OTEL_EXPORTER_OTLP_ENDPOINT takes it
	spans    atomic.Int64
	requests atomic.Int64
	bad      atomic.Int64
	lastBad  atomic.Value // string
}

// otlpCounts is what the receiver got between two readings.
type otlpCounts struct{ spans, requests, bad int64 }

// startOTLPReceiver listens on a free loopback port and serves until close.
func startOTLPReceiver() (*otlpReceiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("OTLP receiver: %w", err)
	}
	rc := &otlpReceiver{endpoint: "http://" + ln.Addr().String()}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", rc.export)
	rc.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = rc.srv.Serve(ln) }()
	return rc, nil
}

func (rc *otlpReceiver) close() {
	ctx, cancel := context.WithTimeout(context.Background(), otlpShutdownTimeout)
	defer cancel()
	if rc.srv.Shutdown(ctx) != nil {
		_ = rc.srv.Close()
	}
}

// counts reads the totals so far.
func (rc *otlpReceiver) counts() otlpCounts {
	return otlpCounts{spans: rc.spans.Load(), requests: rc.requests.Load(), bad: rc.bad.Load()}
}

func (c otlpCounts) since(before otlpCounts) otlpCounts {
	return otlpCounts{spans: c.spans - before.spans, requests: c.requests - before.requests, bad: c.bad - before.bad}
}

// export answers one ExportTraceServiceRequest (protobuf, gzip or not)
// with 200 and an empty response, as the OTLP/HTTP specification says; a
// body that does not decode gets 400 and is counted as bad.
func (rc *otlpReceiver) export(w http.ResponseWriter, r *http.Request) {
	rc.requests.Add(1)
	req, err := decodeExport(w, r)
	if err != nil {
		rc.bad.Add(1)
		rc.lastBad.Store(err.Error())
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var n int64
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			n += int64(len(ss.GetSpans()))
		}
	}
	rc.spans.Add(n)
	b, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(b)
}

func decodeExport(w http.ResponseWriter, r *http.Request) (*collectortrace.ExportTraceServiceRequest, error) {
	if ct := r.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		return nil, fmt.Errorf("content type %q: this receiver takes application/x-protobuf", ct)
	}
	body := io.Reader(http.MaxBytesReader(w, r.Body, otlpMaxBody))
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(body)
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		defer zr.Close()
		body = io.LimitReader(zr, otlpMaxBody+1)
	}
	b, err := io.ReadAll(body)
	if err == nil && len(b) > otlpMaxBody {
		err = errors.New("body over the receiver's limit")
	}
	if err != nil {
		return nil, fmt.Errorf("reading the export: %w", err)
	}
	req := &collectortrace.ExportTraceServiceRequest{}
	if err := proto.Unmarshal(b, req); err != nil {
		return nil, fmt.Errorf("decoding the export: %w", err)
	}
	return req, nil
}
