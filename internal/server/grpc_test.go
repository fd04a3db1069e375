package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/surge-run/surge/internal/seqpb"
	"github.com/surge-run/surge/internal/seqpb/seqpbconnect"
)

// h2cClient speaks HTTP/2 without TLS from the first byte, as gRPC clients
// do against a plaintext server.
func h2cClient() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p}}
}

// The gRPC health service answers on the HTTP listener over h2c: SERVING
// for the server and for itself, NOT_FOUND for a service not served.
// Connect's protocol over HTTP/1.1 reaches the same handler.
func TestGRPCHealth(t *testing.T) {
	base := serveForTest(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	health := grpchealth.NewClient(h2cClient(), base, connect.WithGRPC())
	for _, svc := range []string{"", grpchealth.HealthV1ServiceName} {
		res, err := health.Check(ctx, &grpchealth.CheckRequest{Service: svc})
		if err != nil {
			t.Fatalf("Check(%q): %v", svc, err)
		}
		if res.Status != grpchealth.StatusServing {
			t.Errorf("Check(%q) = %v, want serving", svc, res.Status)
		}
	}
	for _, svc := range []string{"jq.JobService", "jq.WorkerService", "jq.AdminService", "surge.sequencer.v1.SequencerService"} {
		if res, err := health.Check(ctx, &grpchealth.CheckRequest{Service: svc}); err != nil || res.Status != grpchealth.StatusServing {
			t.Errorf("Check(%s) = %v, %v, want serving", svc, res, err)
		}
	}
	_, err := health.Check(ctx, &grpchealth.CheckRequest{Service: "jq.Nope"})
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("Check(jq.Nope), not served: %v, want NOT_FOUND", err)
	}
	overH1 := grpchealth.NewClient(http.DefaultClient, base)
	if res, err := overH1.Check(ctx, &grpchealth.CheckRequest{}); err != nil || res.Status != grpchealth.StatusServing {
		t.Errorf("Check over the Connect protocol and HTTP/1.1: %v, %v", res, err)
	}
}

// A raw gRPC call gets what gRPC requires (HTTP 200, application/grpc,
// grpc-status in the trailers), i.e. it is routed to the health handler
// and not to the JSON 404/405 fallback; a service the server does not
// have gets the fallback's 404, which gRPC clients read as UNIMPLEMENTED.
func TestGRPCRoutingBypassesFallback(t *testing.T) {
	base := serveForTest(t, Config{})
	client := h2cClient()
	// An empty HealthCheckRequest: one uncompressed frame of length 0.
	frame := make([]byte, 5)
	binary.BigEndian.PutUint32(frame[1:], 0)
	req, _ := http.NewRequest("POST", base+"/grpc.health.v1.Health/Check", bytes.NewReader(frame))
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("TE", "trailers")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body) // trailers arrive after the body
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/grpc" || resp.Trailer.Get("Grpc-Status") != "0" {
		t.Fatalf("raw Check: HTTP %d, content type %q, grpc-status %q, body %q",
			resp.StatusCode, resp.Header.Get("Content-Type"), resp.Trailer.Get("Grpc-Status"), body)
	}
	// HealthCheckResponse{status: SERVING}: field 1, varint 1.
	if want := []byte{0, 0, 0, 0, 2, 0x08, 1}; !bytes.Equal(body, want) {
		t.Errorf("raw Check body %x, want %x", body, want)
	}

	unknown := connect.NewClient[emptyMsg, emptyMsg](client, base+"/jq.Nope/SubmitJob", connect.WithGRPC(), connect.WithCodec(rawCodec{}))
	_, err = unknown.CallUnary(context.Background(), connect.NewRequest(&emptyMsg{}))
	if connect.CodeOf(err) != connect.CodeUnimplemented {
		t.Errorf("call to a service not served: %v, want UNIMPLEMENTED", err)
	}
}

// Reflection lists exactly the services served, and resolves their
// descriptors, so grpcurl works without .proto files.
func TestGRPCReflection(t *testing.T) {
	base := serveForTest(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream := grpcreflect.NewClient(h2cClient(), base, connect.WithGRPC()).NewStream(ctx)
	defer stream.Close()
	names, err := stream.ListServices()
	if err != nil {
		t.Fatal(err)
	}
	want := []protoreflect.FullName{grpchealth.HealthV1ServiceName, "jq.JobService", "jq.WorkerService", "jq.AdminService", "surge.sequencer.v1.SequencerService"}
	if !slices.Equal(names, want) {
		t.Errorf("ListServices = %v, want %v", names, want)
	}
	for _, sym := range []protoreflect.FullName{grpchealth.HealthV1ServiceName, "jq.JobService", "surge.sequencer.v1.SequencerService"} {
		files, err := stream.FileContainingSymbol(sym)
		if err != nil || len(files) == 0 {
			t.Errorf("FileContainingSymbol(%s): %d files, %v", sym, len(files), err)
		}
	}
}

// emptyMsg and rawCodec let a test call any path with an empty body
// without generated types for it.
type emptyMsg struct{}

type rawCodec struct{}

func (rawCodec) Name() string                { return "proto" }
func (rawCodec) Marshal(any) ([]byte, error) { return nil, nil }
func (rawCodec) Unmarshal([]byte, any) error { return nil }
func (rawCodec) IsBinary() bool              { return true }

// A worker's stream outlives the server's write and read timeouts, which
// unlimitedStream lifts for its path only: without it, the same stream is
// cut at the timeout.
func TestUnlimitedStreamOutlivesTimeouts(t *testing.T) {
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for range 6 {
			if _, err := w.Write([]byte("x")); err != nil {
				return
			}
			http.NewResponseController(w).Flush()
			time.Sleep(100 * time.Millisecond)
		}
	})
	for _, tc := range []struct {
		path string
		want int
	}{{"/stream", 6}, {"/poll", 6}, {"/other", 0}} {
		var p http.Protocols
		p.SetHTTP1(true)
		p.SetUnencryptedHTTP2(true)
		srv := httptest.NewUnstartedServer(unlimitedStream(slow, "/stream", "/poll"))
		srv.Config.Protocols = &p
		srv.Config.WriteTimeout = 250 * time.Millisecond
		srv.Config.ReadTimeout = 250 * time.Millisecond
		srv.Start()
		res, err := h2cClient().Get(srv.URL + tc.path)
		var body []byte
		if err == nil {
			body, _ = io.ReadAll(res.Body)
			res.Body.Close()
		}
		srv.Close()
		if tc.want > 0 && len(body) != tc.want {
			t.Errorf("%s: read %d bytes (%v), want %d: the stream was cut", tc.path, len(body), err, tc.want)
		}
		if tc.want == 0 && len(body) >= 6 {
			t.Errorf("%s: read all %d bytes past the write timeout; the test does not show the timeout", tc.path, len(body))
		}
	}
}

// The sequencer's service is mounted: a Read through the whole server
// (limits, metrics, the lifted deadlines) sees a message published,
// leased and completed over gRPC.
func TestGRPCSequencerServed(t *testing.T) {
	base := serveForTest(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := seqpbconnect.NewSequencerServiceClient(h2cClient(), base, connect.WithGRPC())
	s, err := c.Read(ctx, connect.NewRequest(&seqpb.ReadRequest{Group: "g"}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := c.Publish(ctx, connect.NewRequest(&seqpb.PublishRequest{Group: "g", Messages: []*seqpb.PublishMessage{{Id: "m", Payload: []byte(`1`)}}})); err != nil {
		t.Fatal(err)
	}
	l, err := c.Lease(ctx, connect.NewRequest(&seqpb.LeaseRequest{Group: "g", Processor: "p", WaitMs: 5000}))
	if err != nil || len(l.Msg.Messages) != 1 {
		t.Fatalf("Lease: %v, %v", l, err)
	}
	if _, err := c.Complete(ctx, connect.NewRequest(&seqpb.CompleteRequest{Group: "g", Processor: "p", Seqs: []uint64{1}})); err != nil {
		t.Fatal(err)
	}
	if !s.Receive() || s.Msg().Message.GetId() != "m" || s.Msg().Message.GetSeq() != 1 {
		t.Fatalf("Read: %v, %v", s.Msg(), s.Err())
	}
}
