package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"io"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/surge-run/surge/internal/jqpb"
	"github.com/surge-run/surge/internal/jqpb/jqpbconnect"
)

// Issue 17, point 4: a worker that stops reading its StreamJobs held the
// stream, its goroutine and the jobs pushed to it for ever, since the
// stream's deadlines are lifted. A send it leaves blocked for
// --stall-timeout ends the stream, and /metrics counts it.
func TestStalledWorkerStreamIsCut(t *testing.T) {
	base := serveForTest(t, Config{StallTimeout: time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A client that buffers little of what it has not read, so the
	// server's sends block once the worker stops reading.
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	hc := &http.Client{Transport: &http.Transport{Protocols: &p,
		HTTP2: &http.HTTP2Config{MaxReceiveBufferPerStream: 64 << 10, MaxReceiveBufferPerConnection: 64 << 10}}}
	w := jqpbconnect.NewWorkerServiceClient(hc, base, connect.WithGRPC())
	j := jqpbconnect.NewJobServiceClient(hc, base, connect.WithGRPC())
	reg, err := w.RegisterWorker(ctx, connect.NewRequest(&jqpb.RegisterWorkerRequest{Concurrency: 64}))
	if err != nil {
		t.Fatal(err)
	}
	for range 24 {
		// Random, so that gzip on the stream cannot shrink it.
		raw := make([]byte, 600<<10)
		rand.Read(raw)
		payload := []byte(`"` + base64.StdEncoding.EncodeToString(raw) + `"`)
		if _, err := j.SubmitJob(ctx, connect.NewRequest(&jqpb.SubmitJobRequest{QueueName: "default", Payload: payload})); err != nil {
			t.Fatal(err)
		}
	}
	stream, err := w.StreamJobs(ctx, connect.NewRequest(&jqpb.StreamJobsRequest{WorkerId: reg.Msg.WorkerId}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	want := []byte(`surge_stream_ended_total{reason="stalled"} 1`)
	for {
		r, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if bytes.Contains(b, want) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the stream of a worker that stopped reading was not cut within 30 s (/metrics lacks %s)", want)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The worker finds its stream ended when it reads again.
	for stream.Receive() {
	}
	if stream.Err() == nil {
		t.Fatal("the cut stream ended cleanly")
	}
}
