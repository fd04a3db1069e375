package server

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpcreflect"
	"google.golang.org/protobuf/proto"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/jqpb"
	"github.com/surge-run/surge/internal/jqpb/jqpbconnect"
	"github.com/surge-run/surge/internal/promtest"
	"github.com/surge-run/surge/internal/workload/jobs"
)

// heldBackBody is a gRPC request body of one message whose last byte it
// sends only when let go, counting what the client's transport took.
type heldBackBody struct {
	msg  []byte
	sent atomic.Int64
	let  chan struct{}
	gone bool // let go
}

func (b *heldBackBody) Read(p []byte) (int, error) {
	at := int(b.sent.Load())
	if at == len(b.msg) {
		return 0, io.EOF
	}
	if at == len(b.msg)-1 {
		<-b.let
	}
	end := min(len(b.msg), at+len(p))
	if at < len(b.msg)-1 {
		end = min(end, len(b.msg)-1)
	}
	n := copy(p, b.msg[at:end])
	b.sent.Add(int64(n))
	return n, nil
}

// submitRaw sends body, a gRPC SubmitJob request (gzip-compressed if gz)
// whose length nothing declares, to base and returns the call's
// grpc-status, or the transport's error.
func submitRaw(ctx context.Context, client *http.Client, base string, body io.Reader, gz bool) string {
	r, _ := http.NewRequestWithContext(ctx, "POST", base+jqpbconnect.JobServiceSubmitJobProcedure, body)
	r.ContentLength = -1
	r.Header.Set("Content-Type", "application/grpc")
	r.Header.Set("TE", "trailers")
	if gz {
		r.Header.Set("Grpc-Encoding", "gzip")
	}
	resp, err := client.Do(r)
	if err != nil {
		return err.Error()
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.Trailer.Get("Grpc-Status") + resp.Header.Get("Grpc-Status")
}

// answeredAndFreed: every call ended OK, and the budget holds nothing.
func answeredAndFreed(t *testing.T, s *Server, statuses []string) {
	t.Helper()
	for i, st := range statuses {
		if st != "0" {
			t.Errorf("call %d ended with %q, want grpc-status 0", i, st)
		}
	}
	if held := s.srv.Bodies().Held(); held != 0 {
		t.Errorf("%d bytes of the budget still held after every call was answered", held)
	}
}

// Large unary messages on --grpc-addr wait for room in the body budget
// (--max-body-memory) before grpc-go reads them, as large bodies do on
// --addr: with room for two of the largest message, two of six calls
// whose messages are 512 KiB are read while the other four hold only
// their stream's window, and each call is read and answered once one
// before it is. grpc-go alone read all six at once. A compressed message
// holds twice as much (as it came, and inflated): with room for four of
// the largest, two are read.
func TestGRPCGoMessagesWaitForTheBodyBudget(t *testing.T) {
	for _, gz := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "gzip"}[gz], func(t *testing.T) { messagesWaitForTheBudget(t, gz) })
	}
}

func messagesWaitForTheBudget(t *testing.T, gz bool) {
	budget := 2 * jobs.MaxMessageBytes
	if gz {
		budget *= 2
	}
	s, tr := serveBoth(t, Config{MaxBodyMemory: int64(budget)})
	payload := make([]byte, 512<<10)
	rand.NewChaCha8([32]byte{1}).Read(payload) // incompressible: the message stays larger than its window
	req, err := proto.Marshal(&jqpb.SubmitJobRequest{QueueName: "default", Payload: payload})
	if err != nil {
		t.Fatal(err)
	}
	flag := byte(0)
	if gz {
		var b bytes.Buffer
		w := gzip.NewWriter(&b)
		w.Write(req)
		w.Close()
		req, flag = b.Bytes(), 1
	}
	msg := append(binary.BigEndian.AppendUint32([]byte{flag}, uint32(len(req))), req...)
	const calls = 6
	bodies := make([]*heldBackBody, calls)
	statuses := make([]string, calls)
	var wg sync.WaitGroup
	client := h2cClient()
	ctx := ctx30(t)
	for i := range bodies {
		bodies[i] = &heldBackBody{msg: msg, let: make(chan struct{})}
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i] = submitRaw(ctx, client, tr[1].base, bodies[i], gz)
		}()
	}
	// What a call's client could send before the server asked for its
	// message: the stream's window, and a frame its transport read ahead.
	const unread = grpcStreamWindow + 64<<10
	read := func() (n int) {
		for _, b := range bodies {
			if b.sent.Load() == int64(len(msg)-1) && !b.gone {
				n++
			}
		}
		return n
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			if ctx.Err() != nil {
				var sent []int64
				for _, b := range bodies {
					sent = append(sent, b.sent.Load())
				}
				t.Fatalf("%s: bytes sent per call %v of %d; body waits %v", what, sent, len(msg), waits(t, s))
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitFor("two messages read, four waiting", func() bool { return read() == 2 && waits(t, s) == calls-2 })
	for lets := 0; lets < calls; lets++ {
		// The calls still waiting hold no more than their windows.
		for _, b := range bodies {
			if n := b.sent.Load(); n < int64(len(msg)-1) && n > unread {
				t.Fatalf("a waiting call's client sent %d bytes, more than the %d its window allows", n, unread)
			}
		}
		if held := s.srv.Bodies().Held(); held > int64(budget) {
			t.Fatalf("%d bytes of the budget held, over its %d", held, budget)
		}
		// Let a read one finish: once it is answered, the next waiting
		// call is read.
		next := slices.IndexFunc(bodies, func(b *heldBackBody) bool { return b.sent.Load() == int64(len(msg)-1) && !b.gone })
		if next < 0 {
			t.Fatalf("after %d calls answered, none is read", lets)
		}
		close(bodies[next].let)
		bodies[next].gone = true
		want := min(lets+1+2, calls)
		waitFor("the next call read once one is answered", func() bool { return read()+lets+1 >= want })
	}
	wg.Wait()
	answeredAndFreed(t, s, statuses)
}

// waits is surge_http_body_waits_total of s.
func waits(t *testing.T, s *Server) float64 {
	v, _ := promtest.Value(t, s.reg, "surge_http_body_waits_total", nil)
	return v
}

// Reflection's streams, whose messages cannot wait for the body budget,
// are bounded in number instead: with grpcMaxClientStreams open, one
// more is refused RESOURCE_EXHAUSTED, and once one closes another opens.
func TestGRPCGoReflectionStreamsAreBounded(t *testing.T) {
	_, tr := serveBoth(t, Config{})
	ctx := ctx30(t)
	client := grpcreflect.NewClient(h2cClient(), tr[1].base, connect.WithGRPC())
	open := func() (*grpcreflect.ClientStream, error) {
		st := client.NewStream(ctx)
		_, err := st.ListServices()
		return st, err
	}
	var streams []*grpcreflect.ClientStream
	defer func() {
		for _, st := range streams {
			st.Close()
		}
	}()
	for range grpcMaxClientStreams {
		st, err := open()
		if err != nil {
			t.Fatalf("reflection stream %d: %v", len(streams)+1, err)
		}
		streams = append(streams, st)
	}
	st, err := open()
	st.Close()
	if connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("reflection stream %d: %v, want RESOURCE_EXHAUSTED", grpcMaxClientStreams+1, err)
	}
	streams[0].Close()
	streams = streams[1:]
	for {
		st, err := open()
		if err == nil {
			streams = append(streams, st)
			break
		}
		st.Close()
		if connect.CodeOf(err) != connect.CodeResourceExhausted || ctx.Err() != nil {
			t.Fatalf("a reflection stream after one closed: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// unendedBody is a gRPC request body that sends its message and then
// does not end until let go, as a client that never half-closes.
type unendedBody struct {
	msg []byte
	let chan struct{}
}

func (b *unendedBody) Read(p []byte) (int, error) {
	if len(b.msg) > 0 {
		n := copy(p, b.msg)
		b.msg = b.msg[n:]
		return n, nil
	}
	<-b.let
	return 0, io.EOF
}

// A call whose client sends its message and does not end its side holds
// its room in the body budget only for the read timeout: two such calls
// fill a budget of two of the largest messages, and a third call is
// served once the timeout has passed, not after the budget's 30-second
// wait. The two are served when their clients end.
func TestGRPCGoUnendedCallGivesBackItsRoom(t *testing.T) {
	s, tr := serveBoth(t, Config{MaxBodyMemory: 2 * jobs.MaxMessageBytes, ReadTimeout: 300 * time.Millisecond})
	req, err := proto.Marshal(&jqpb.SubmitJobRequest{QueueName: "default", Payload: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	msg := append(binary.BigEndian.AppendUint32([]byte{0}, uint32(len(req))), req...)
	ctx := ctx30(t)
	client := h2cClient()
	var wg sync.WaitGroup
	statuses := make([]string, 2)
	lets := make([]chan struct{}, 2)
	for i := range lets {
		lets[i] = make(chan struct{})
		body := &unendedBody{msg: slices.Clone(msg), let: lets[i]}
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i] = submitRaw(ctx, client, tr[1].base, body, false)
		}()
	}
	for s.srv.Bodies().Held() < 2*jobs.MaxMessageBytes {
		if ctx.Err() != nil {
			t.Fatalf("the two unended calls hold %d bytes of the budget, want all %d", s.srv.Bodies().Held(), 2*jobs.MaxMessageBytes)
		}
		time.Sleep(5 * time.Millisecond)
	}
	c := jqpbconnect.NewJobServiceClient(h2cClient(), tr[1].base, connect.WithGRPC())
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := c.SubmitJob(cctx, connect.NewRequest(&jqpb.SubmitJobRequest{QueueName: "default", Payload: []byte("y")})); err != nil {
		t.Fatalf("a call beside two unended ones: %v, want it served once their read timeout passed", err)
	}
	for _, l := range lets {
		close(l)
	}
	wg.Wait()
	answeredAndFreed(t, s, statuses)
}

// The sweep gives back a read's room only once the read is older than
// the read timeout by the sweep's clock: not while it is younger, not
// when it was stamped with the last tick before a pause of the whole
// process (it may have begun just after the pause), and at the first
// tick after that which finds it old.
func TestSlowReadsSweepByTheirTick(t *testing.T) {
	const timeout, tick = 4 * time.Second, time.Second
	bodies := api.NewBodyBudget(1 << 20)
	var s slowReads
	read := func(n int64) *budgetedRead {
		held, err := bodies.Hold(context.Background(), n)
		if err != nil {
			t.Fatal(err)
		}
		r := &budgetedRead{shard: s.shard()}
		r.reading.Store(held)
		s.add(r)
		return r
	}
	sec := int64(time.Second)
	s.clock.Store(100 * sec)
	old := read(1000) // begun after the tick at 100 s
	for now := int64(101); now <= 105; now++ {
		s.tick(now*sec, timeout, tick, bodies)
	}
	if old.reading.Load() != 1000 {
		t.Fatalf("a read at most 5 s old, timeout 4 s plus a tick, gave back its room early (holds %d)", old.reading.Load())
	}
	s.tick(106*sec, timeout, tick, bodies)
	if old.reading.Load() != 0 || bodies.Held() != 0 {
		t.Fatalf("a read over 5 s old still holds %d (budget %d)", old.reading.Load(), bodies.Held())
	}
	// A pause: the next tick comes 60 s late, after a read began (it may
	// have begun just before that tick), so it counts from that tick.
	late := read(2000)
	for now := int64(166); now <= 171; now++ {
		s.tick(now*sec, timeout, tick, bodies)
		if late.reading.Load() != 2000 {
			t.Fatalf("a read stamped with the tick before a pause was given back %d s after the late tick, before the timeout plus a tick", now-166)
		}
	}
	s.tick(172*sec, timeout, tick, bodies)
	if late.reading.Load() != 0 || bodies.Held() != 0 {
		t.Fatalf("6 s after the late tick the read still holds %d", late.reading.Load())
	}
	s.remove(old)
	s.remove(late)
}
