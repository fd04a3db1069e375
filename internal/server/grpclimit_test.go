package server

import (
	"context"
	"encoding/binary"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/surge-run/surge/internal/jqpb"
	"github.com/surge-run/surge/internal/jqpb/jqpbconnect"
	"github.com/surge-run/surge/internal/seqpb"
	"github.com/surge-run/surge/internal/seqpb/seqpbconnect"
	"github.com/surge-run/surge/internal/workload/jobs"
	"github.com/surge-run/surge/internal/workload/sequencer"
)

// hugeBody is a request body of head then size zero bytes, made as it is
// read, counting what the server took from it.
type hugeBody struct {
	head []byte
	left int64
	read atomic.Int64
}

func (b *hugeBody) Read(p []byte) (int, error) {
	if len(b.head) == 0 && b.left == 0 {
		return 0, io.EOF
	}
	n := copy(p, b.head)
	b.head = b.head[n:]
	if z := min(int64(len(p)-n), b.left); z > 0 {
		clear(p[n : n+int(z)])
		n += int(z)
		b.left -= z
	}
	b.read.Add(int64(n))
	return n, nil
}

// A request message far over a service's limit (256 MiB, as in the
// report) is refused with RESOURCE_EXHAUSTED having read at most about
// the limit, not the whole body into memory, over gRPC (h2c) and over
// Connect (HTTP/1.1), for the jobs and the sequencer services; the server
// serves normally after.
func TestGRPCRequestTooLargeIsNotRead(t *testing.T) {
	base := serveForTest(t, Config{})
	const huge = 256 << 20
	for _, tc := range []struct {
		name, path string
		limit      int
		grpc       bool
	}{
		{"gRPC SubmitJob", jqpbconnect.JobServiceSubmitJobProcedure, jobs.MaxMessageBytes, true},
		{"gRPC SubmitJobs", jqpbconnect.JobServiceSubmitJobsProcedure, jobs.MaxMessageBytes, true},
		{"gRPC Publish", seqpbconnect.SequencerServicePublishProcedure, sequencer.MaxMessageBytes, true},
		{"Connect SubmitJob", jqpbconnect.JobServiceSubmitJobProcedure, jobs.MaxMessageBytes, false},
		{"Connect Publish", seqpbconnect.SequencerServicePublishProcedure, sequencer.MaxMessageBytes, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := &hugeBody{left: huge}
			client := http.DefaultClient
			if tc.grpc {
				// The gRPC envelope: uncompressed, then the length.
				body.head = binary.BigEndian.AppendUint32([]byte{0}, huge)
				client = h2cClient()
			}
			req, _ := http.NewRequest("POST", base+tc.path, body)
			req.ContentLength = -1 // streamed: nothing declares the size
			if tc.grpc {
				req.Header.Set("Content-Type", "application/grpc")
				req.Header.Set("TE", "trailers")
			} else {
				req.Header.Set("Content-Type", "application/proto")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			resp, err := client.Do(req.WithContext(ctx))
			if err != nil {
				t.Fatalf("no answer (%d bytes sent): %v", body.read.Load(), err)
			}
			answer, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if tc.grpc {
				st := resp.Trailer.Get("Grpc-Status") + resp.Header.Get("Grpc-Status")
				msg := resp.Trailer.Get("Grpc-Message") + resp.Header.Get("Grpc-Message")
				if st != "8" {
					t.Errorf("grpc-status %q (%s), want 8 (RESOURCE_EXHAUSTED)", st, msg)
				}
			} else if !strings.Contains(string(answer), "resource_exhausted") {
				t.Errorf("HTTP %d %s, want a resource_exhausted error", resp.StatusCode, answer)
			}
			// What left the client's reader: what the server read plus
			// what sat in buffers when it stopped. HTTP/2's flow control
			// bounds the buffers; over HTTP/1.1 the kernel's socket
			// buffers do (Linux lets a loopback receive buffer grow to
			// 32 MiB).
			bound := int64(2 * tc.limit)
			if !tc.grpc {
				bound = int64(tc.limit) + 40<<20
			}
			t.Logf("%d bytes left the client (bound %d)", body.read.Load(), bound)
			if n := body.read.Load(); n > bound {
				t.Errorf("%d bytes of a %d-byte message whose limit is %d left the client; want at most %d", n, huge, tc.limit, bound)
			}
		})
	}
	// Still serving, over both protocols.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, opts := range [][]connect.ClientOption{{connect.WithGRPC()}, nil} {
		c := jqpbconnect.NewJobServiceClient(h2cClient(), base, opts...)
		if _, err := c.SubmitJob(ctx, connect.NewRequest(&jqpb.SubmitJobRequest{QueueName: "default", Payload: []byte("x")})); err != nil {
			t.Fatalf("SubmitJob after the refusals: %v", err)
		}
		s := seqpbconnect.NewSequencerServiceClient(h2cClient(), base, opts...)
		if _, err := s.Publish(ctx, connect.NewRequest(&seqpb.PublishRequest{Group: "g", Messages: []*seqpb.PublishMessage{{Payload: []byte("1")}}})); err != nil {
			t.Fatalf("Publish after the refusals: %v", err)
		}
	}
}
