package server

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/surge-run/surge/internal/api"
)

// grpc-go reads a unary call's whole request message (up to the largest
// message, 4 MiB) before any interceptor or handler runs, and opens the
// stream's flow-control window for all of it. Nothing of the server's
// could refuse or delay that read, so a connection could hold
// --grpc-max-streams such messages, and --max-conns connections as many
// each: the body budget (--max-body-memory), which bounds large bodies on
// --addr, did not reach this listener.
//
// So the edge serves each unary method as a grpc-go stream (the wire is
// the same: one message each way), whose handler runs before the message
// is read. It holds the largest message's bytes of the body budget while
// grpc-go reads the message, waiting for them as a large body on --addr
// does, and then only the message's own size if that is large; a small
// message's bytes are not counted, as on --addr. A server-streaming call
// reads its one message the same way. Until its handler asks, a stream
// holds at most its flow-control window (grpcStreamWindow) of unread
// request bytes. Client-streaming calls are counted instead
// (grpcMaxClientStreams).

// grpcMaxClientStreams bounds the calls open at once, over the whole
// server, of methods whose client streams (reflection's are the only
// ones): each may hold one request message of up to the largest size
// outside the budget, since a stream waiting for its next message cannot
// hold the largest message's bytes for as long as it idles. Reflection
// clients (grpcurl, ghz, grpcui) ask a few questions on one stream and
// close it.
const grpcMaxClientStreams = 32

// grpcStreamWindow is the flow-control window of each stream: the request
// bytes a stream can hold before its handler reads. It is static, where
// grpc-go's default grows the window up to 16 MiB with its bandwidth
// estimate; a message being read gets a window of its whole size anyway.
const grpcStreamWindow = 64 << 10

// grpcConnWindow is the connection's window: grpc-go gives it back as
// data arrives, not as handlers read it, so it bounds no memory, and a
// small one would only slow large messages on a distant client.
const grpcConnWindow = 16 << 20

// budgetedRegistrar registers services on the edge's server with their
// unary methods served as streams that read through the body budget.
type budgetedRegistrar struct{ e *grpcEdge }

func (r budgetedRegistrar) RegisterService(d *grpc.ServiceDesc, impl any) {
	nd := *d
	nd.Methods = nil
	nd.Streams = slices.Clone(d.Streams)
	for _, m := range d.Methods {
		nd.Streams = append(nd.Streams, grpc.StreamDesc{StreamName: m.MethodName, Handler: r.e.unaryStream(m.Handler)})
	}
	r.e.srv.RegisterService(&nd, impl)
}

// unaryStream serves the unary method h as a stream: h reads its message
// through the budget, runs the unary interceptor, and its reply is the
// stream's one message.
func (e *grpcEdge) unaryStream(h grpc.MethodHandler) grpc.StreamHandler {
	return func(srv any, ss grpc.ServerStream) error {
		r := e.reads.Get().(*budgetedRead)
		r.ServerStream = ss
		reply, err := h(srv, ss.Context(), r.recv, e.unary)
		r.done()
		r.ServerStream = nil
		e.reads.Put(r)
		if err != nil {
			return err
		}
		return ss.SendMsg(reply)
	}
}

// newBudgetedRead is a read for the edge's pool, its RecvMsg bound once:
// made per call, the read and the bound method were two allocations.
func (e *grpcEdge) newBudgetedRead() any {
	r := &budgetedRead{e: e, shard: e.slow.shard()}
	r.recv = r.RecvMsg
	return r
}

// budgetedRead is a call's stream whose RecvMsg holds its room in the
// body budget; done gives back what it still holds.
type budgetedRead struct {
	grpc.ServerStream
	e    *grpcEdge
	held int64
	recv func(any) error // RecvMsg, bound
	// reading is what the read in progress holds; since when it began
	// (the sweep's clock), idx its place in its shard of the edge's
	// slowReads.
	reading atomic.Int64
	since   int64
	idx     int
	shard   *slowShard // of the edge's slowReads, for the read's life
}

func (r *budgetedRead) RecvMsg(m any) error {
	ctx := r.ServerStream.Context()
	n, err := r.e.bodies.Hold(ctx, readSize(ctx, r.e.maxMessage))
	if err != nil {
		return api.GRPCError(ctx, err)
	}
	r.reading.Store(n)
	r.e.slow.add(r)
	err = r.ServerStream.RecvMsg(m)
	r.e.slow.remove(r)
	n = r.reading.Swap(0) // 0 if the sweep gave it back
	keep := int64(0)
	if pm, ok := m.(proto.Message); ok && err == nil {
		if size := int64(proto.Size(pm)); size > api.SmallBody {
			keep = min(size, n)
		}
	}
	r.e.bodies.Give(n - keep)
	r.held += keep
	return err
}

func (r *budgetedRead) done() {
	r.e.bodies.Give(r.held)
	r.held = 0
}

// readSize is what reading a message of up to max bytes may hold: a
// compressed one is held as it came and as grpc-go inflates it (up to
// max too), both at once.
func readSize(ctx context.Context, max int) int64 {
	if st, ok := grpc.ServerTransportStreamFromContext(ctx).(interface{ RecvCompress() string }); ok {
		if c := st.RecvCompress(); c != "" && c != "identity" {
			return 2 * int64(max)
		}
	}
	return int64(max)
}

// slowReads are the reads in progress. A unary call holds the largest
// message's room until grpc-go has its message and the client's end of
// the stream, so a client that sends a small message and never
// half-closes (or trickles a large one) would keep that room from every
// other call: 64 such streams, and every call on --grpc-addr waits. On
// --addr the read timeout ends such a request; grpc-go has no read
// timeout of a call's own, so the sweep gives back the room of a read
// older than the read timeout instead, and the call goes on uncounted.
//
// Every call adds its read and removes it: the reads are spread over
// shards, each with its own lock, so calls on different cores seldom
// share one, and a read is stamped with the sweep's clock (its last
// tick), not the system's.
type slowReads struct {
	shards [slowShards]slowShard
	next   atomic.Uint32 // the shard of the next read made
	clock  atomic.Int64  // the sweep's last tick, UnixNano
}

// slowShards: more than the cores a server here runs on.
const slowShards = 16

type slowShard struct {
	mu    sync.Mutex
	reads []*budgetedRead
	_     [64]byte // its own cache line: no false sharing between shards
}

// shard is the shard for a new read.
func (s *slowReads) shard() *slowShard {
	return &s.shards[s.next.Add(1)%slowShards]
}

func (s *slowReads) add(r *budgetedRead) {
	sh := r.shard
	sh.mu.Lock()
	// Read under the shard's lock: a late tick moves the clock before it
	// takes the shards' locks, so a read it does not find has the new
	// clock, and one it finds with the old one it restamps.
	r.since = s.clock.Load()
	r.idx = len(sh.reads)
	sh.reads = append(sh.reads, r)
	sh.mu.Unlock()
}

func (s *slowReads) remove(r *budgetedRead) {
	sh := r.shard
	sh.mu.Lock()
	last := sh.reads[len(sh.reads)-1]
	sh.reads[r.idx], last.idx = last, r.idx
	sh.reads[len(sh.reads)-1] = nil
	sh.reads = sh.reads[:len(sh.reads)-1]
	sh.mu.Unlock()
}

// sweep gives back the room of the reads stamped before cutoff.
func (s *slowReads) sweep(cutoff int64, bodies *api.BodyBudget) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for _, r := range sh.reads {
			if r.since < cutoff {
				bodies.Give(r.reading.Swap(0))
			}
		}
		sh.mu.Unlock()
	}
}

// sweepSlowReads sweeps every quarter of the read timeout (at most every
// second) until quit closes.
func (e *grpcEdge) sweepSlowReads(timeout time.Duration, quit <-chan struct{}) {
	tick := min(max(timeout/4, 10*time.Millisecond), time.Second)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-quit:
			return
		case now := <-t.C:
			e.slow.tick(now.UnixNano(), timeout, tick, e.bodies)
		}
	}
}

// tick moves the sweep's clock to now and gives back the room of the
// reads older than timeout. A read is stamped with the tick before it
// began, up to a tick early, so the cutoff is a tick earlier too: a read
// is given back between one and one and a half timeouts after it began.
// A tick that comes late (the process was paused, or its sweep starved)
// cannot tell when the reads stamped with the tick before it began: any
// time until now. It counts them from now, so a read begun just before
// the late tick is not given back at the next one; one that was stuck
// before the pause gets up to a timeout and a half more.
func (s *slowReads) tick(now int64, timeout, tick time.Duration, bodies *api.BodyBudget) {
	last := s.clock.Swap(now)
	if now-last > int64(tick)*3/2 {
		s.restamp(last, now)
	}
	// Nor is a read stamped with the last tick given back, however short
	// the timeout against the tick (10 ms at least).
	s.sweep(min(now-int64(timeout+tick), last), bodies)
}

// restamp moves the reads stamped last to now.
func (s *slowReads) restamp(last, now int64) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for _, r := range sh.reads {
			if r.since == last {
				r.since = now
			}
		}
		sh.mu.Unlock()
	}
}
