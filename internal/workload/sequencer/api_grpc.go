package sequencer

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/seqpb"
	"github.com/surge-run/surge/internal/seqpb/seqpbconnect"
)

// The gRPC service (proto/surge/sequencer/v1) is served by the same API
// value as the HTTP routes: the same checks, the same hub of waiters and
// the same Shutdown.
var _ seqpbconnect.SequencerServiceHandler = (*API)(nil)

// Paths of the calls that may outlast the server's request timeouts:
// Read follows a group for as long as the client wants, Lease waits up
// to MaxWait, longer than the server's 30 s write timeout.
const (
	ReadPath  = "/" + seqpbconnect.SequencerServiceName + "/Read"
	LeasePath = "/" + seqpbconnect.SequencerServiceName + "/Lease"
)

// GRPCHandler returns the service's path prefix and handler, built with
// opts, for the server's mux. Read and Lease get an api.Stream: they may
// outlast the server's timeouts, Read's pages are bounded like the SSE
// stream's, and a Lease's answer that did not go out is given back.
func (a *API) GRPCHandler(opts ...connect.HandlerOption) (string, http.Handler) {
	path, h := seqpbconnect.NewSequencerServiceHandler(a, opts...)
	return path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != ReadPath && r.URL.Path != LeasePath {
			h.ServeHTTP(w, r)
			return
		}
		st := api.OpenStream(w, r)
		defer st.Close()
		lc := &leaseCall{}
		ctx := context.WithValue(api.WithStream(r.Context(), st), leaseKey{}, lc)
		h.ServeHTTP(w, r.WithContext(ctx))
		if lc.msgs == nil {
			return
		}
		// The answer is written; it went out only if it can be flushed
		// and, over HTTP/2, the client has not given up on the call
		// (the end of the stream follows). Over HTTP/1.1 a Connect
		// client may have read the whole answer and gone already.
		if st.Write(nil) != nil || (r.ProtoMajor >= 2 && r.Context().Err() != nil) {
			a.giveBack(r.Context(), lc.group, lc.proc, lc.msgs)
		}
	})
}

// leaseCall records what a gRPC Lease took, for the handler wrapper to
// give back if the answer does not go out.
type leaseCall struct {
	group, proc string
	msgs        []Message
}

type leaseKey struct{}

// --- errors ---

func grpcErr(code connect.Code, format string, a ...any) *connect.Error {
	return connect.NewError(code, fmt.Errorf(format, a...))
}

// refusedErr maps a refused command to its code; nil for a success. A
// conflict in a publish is ALREADY_EXISTS (the seq is another message's,
// or released already: resending under it can never succeed); any other
// conflict is FAILED_PRECONDITION (the message or consumer is not in the
// state the call needs: not leased to this processor, a commit going
// back).
func refusedErr(res *Result, publish bool) error {
	code := connect.CodeInternal
	switch res.Outcome {
	case OK, Created, Same:
		return nil
	case NotFound:
		code = connect.CodeNotFound
	case Invalid:
		code = connect.CodeInvalidArgument
	case Conflict:
		code = connect.CodeFailedPrecondition
		if publish {
			code = connect.CodeAlreadyExists
		}
	case Exhausted:
		code = connect.CodeResourceExhausted
	}
	return connect.NewError(code, errors.New(res.Msg))
}

var errShuttingDown = grpcErr(connect.CodeUnavailable, "the server is shutting down; retry")

func (a *API) shuttingDown() bool {
	select {
	case <-a.done:
		return true
	default:
		return false
	}
}

func checkNameErr(what, s string, max int) error {
	if p := checkName(what, s, max); p != "" {
		return connect.NewError(connect.CodeInvalidArgument, errors.New(p))
	}
	return nil
}

// doGRPC applies cmd at the group's partition; the error is the engine's
// or the machine's refusal, mapped.
func (a *API) doGRPC(ctx context.Context, group string, cmd engine.Command, publish bool) (*Result, error) {
	res, err := a.doRaw(ctx, group, cmd)
	if err != nil {
		return nil, api.GRPCEngineError(err)
	}
	if err := refusedErr(res, publish); err != nil {
		return nil, err
	}
	return res, nil
}

// --- wire forms ---

func pbTime(ns int64) *timestamppb.Timestamp {
	if ns == 0 {
		return nil
	}
	return timestamppb.New(time.Unix(0, ns))
}

func messagePB(m *Message) *seqpb.Message {
	return &seqpb.Message{Group: m.Group, Id: m.ID, Seq: m.Seq, Payload: m.Payload, CreatedAt: pbTime(m.Created),
		ProcessingAt: pbTime(m.Processing), ProcessedAt: pbTime(m.Processed), ReleasedAt: pbTime(m.Released)}
}

func messagesPB(ms []Message) []*seqpb.Message {
	out := make([]*seqpb.Message, len(ms))
	for i := range ms {
		out[i] = messagePB(&ms[i])
	}
	return out
}

// --- the calls ---

// Publish publishes a batch all or nothing, as the HTTP batch does, with
// its checks (publishBatchOf). A payload must be JSON text (or empty):
// the HTTP API serves the same messages with the payload inline as JSON,
// and bytes it cannot embed would make every read of the group fail
// there.
func (a *API) Publish(ctx context.Context, req *connect.Request[seqpb.PublishRequest]) (*connect.Response[seqpb.PublishResponse], error) {
	m := req.Msg
	if err := checkNameErr("group name", m.Group, MaxNameLen); err != nil {
		return nil, err
	}
	// The HTTP batch's checks and command: an empty id is drawn there too,
	// and a JSON null is no payload in both.
	msgs := make([]publishBody, len(m.Messages))
	for i, pm := range m.Messages {
		msgs[i] = publishBody{Seq: pm.Seq, Payload: pm.Payload}
		if pm.Id != "" {
			msgs[i].ID = &pm.Id
		}
	}
	batch, bad := a.publishBatchOf(m.Group, msgs)
	if bad != nil {
		code := connect.CodeInvalidArgument
		if bad.tooLarge {
			code = connect.CodeResourceExhausted
		}
		return nil, grpcErr(code, "%s (nothing was published)", bad.msg)
	}
	res, err := a.doGRPC(ctx, m.Group, batch, true)
	if err != nil {
		return nil, err
	}
	seqs := make([]uint64, len(res.Each))
	for i, e := range res.Each {
		seqs[i] = e.Seq
	}
	return connect.NewResponse(&seqpb.PublishResponse{Seqs: seqs}), nil
}

// Lease leases up to max ready messages, waiting up to wait_ms for a
// Ready note while there are none. A group nobody published to yet
// answers an empty list, so processors may start before publishers.
func (a *API) Lease(ctx context.Context, req *connect.Request[seqpb.LeaseRequest]) (*connect.Response[seqpb.LeaseResponse], error) {
	m := req.Msg
	if err := checkNameErr("group name", m.Group, MaxNameLen); err != nil {
		return nil, err
	}
	if err := checkNameErr("processor", m.Processor, MaxIDLen); err != nil {
		return nil, err
	}
	n := m.Max
	if n == 0 {
		n = 1
	}
	if n < 0 || n > MaxLeaseBatch {
		return nil, grpcErr(connect.CodeInvalidArgument, "max must be from 1 to %d, got %d", MaxLeaseBatch, m.Max)
	}
	lease, problem := checkLeaseMs(int64(m.LeaseMs))
	if problem != "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("lease_ms: "+problem))
	}
	if m.WaitMs < 0 || int64(m.WaitMs) > MaxWait.Milliseconds() {
		return nil, grpcErr(connect.CodeInvalidArgument, "wait_ms must be from 0 to %d, got %d", MaxWait.Milliseconds(), m.WaitMs)
	}
	var wt *waiter
	if m.WaitMs > 0 {
		wt = a.hub.waiters.AddPoll(readyKey(m.Group))
		defer a.hub.waiters.Remove(readyKey(m.Group), wt)
	}
	deadline := time.Now().Add(time.Duration(m.WaitMs) * time.Millisecond)
	cmd := &Lease{Group: m.Group, Processor: m.Processor, Max: n, LeaseNs: int64(lease), MaxBytes: MaxLeaseBytes}
	for {
		// Not cancelled with the call: a lease taken as its client goes
		// must be known, to be given back.
		res, err := a.doRaw(context.WithoutCancel(ctx), m.Group, cmd)
		if err != nil {
			return nil, api.GRPCEngineError(err)
		}
		if res.Outcome != NotFound {
			if err := refusedErr(res, false); err != nil {
				return nil, err
			}
		}
		if len(res.Messages) > 0 || wt == nil {
			if err := ctx.Err(); err != nil {
				a.giveBack(ctx, m.Group, m.Processor, res.Messages)
				return nil, api.GRPCEngineError(err)
			}
			if lc, ok := ctx.Value(leaseKey{}).(*leaseCall); ok && len(res.Messages) > 0 {
				lc.group, lc.proc, lc.msgs = m.Group, m.Processor, res.Messages
			}
			return connect.NewResponse(&seqpb.LeaseResponse{Messages: messagesPB(res.Messages)}), nil
		}
		left := time.Until(deadline)
		if left <= 0 || !wt.Wait(ctx, a.done, left) {
			if err := ctx.Err(); err != nil {
				return nil, api.GRPCEngineError(err)
			}
			if a.shuttingDown() {
				return nil, errShuttingDown
			}
			return connect.NewResponse(&seqpb.LeaseResponse{}), nil
		}
	}
}

// Complete completes each seq as its own command, concurrently, as the
// HTTP route does. The seqs are not all or nothing: each leased message
// is the processor's own, so one refused seq leaves the others
// completed; the error names the first refused one.
func (a *API) Complete(ctx context.Context, req *connect.Request[seqpb.CompleteRequest]) (*connect.Response[seqpb.CompleteResponse], error) {
	m := req.Msg
	if err := checkNameErr("group name", m.Group, MaxNameLen); err != nil {
		return nil, err
	}
	if err := checkNameErr("processor", m.Processor, MaxIDLen); err != nil {
		return nil, err
	}
	if len(m.Seqs) == 0 || len(m.Seqs) > MaxLeaseBatch {
		return nil, grpcErr(connect.CodeInvalidArgument, "seqs must hold 1 to %d seqs, got %d", MaxLeaseBatch, len(m.Seqs))
	}
	for _, s := range m.Seqs {
		if s == 0 || s > 1<<63-1 {
			return nil, grpcErr(connect.CodeInvalidArgument, "seq %d is not a message's seq (1 to %d)", s, int64(1<<63-1))
		}
	}
	// One command for the whole batch: each seq is checked and completed
	// on its own, and the run is released once.
	all, err := a.doRaw(ctx, m.Group, &CompleteBatch{Group: m.Group, Processor: m.Processor, Seqs: m.Seqs})
	if err != nil {
		return nil, api.GRPCEngineError(err)
	}
	pos := all.Position
	var first error
	for i := range m.Seqs {
		res := all // a refusal of the whole command (no such group) is every seq's
		if all.Each != nil {
			res = all.Each[i]
		}
		if err := refusedErr(res, false); err != nil && first == nil {
			ce := err.(*connect.Error)
			first = grpcErr(ce.Code(), "seq %d: %s (each other seq of the call was completed unless refused too)", m.Seqs[i], res.Msg)
		}
	}
	if first != nil {
		return nil, first
	}
	return connect.NewResponse(&seqpb.CompleteResponse{Released: pos}), nil
}

func (a *API) Extend(ctx context.Context, req *connect.Request[seqpb.ExtendRequest]) (*connect.Response[seqpb.ExtendResponse], error) {
	m := req.Msg
	if err := checkNameErr("group name", m.Group, MaxNameLen); err != nil {
		return nil, err
	}
	if err := checkNameErr("processor", m.Processor, MaxIDLen); err != nil {
		return nil, err
	}
	lease, problem := checkLeaseMs(int64(m.LeaseMs))
	if problem != "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("lease_ms: "+problem))
	}
	if _, err := a.doGRPC(ctx, m.Group, &Extend{Group: m.Group, Processor: m.Processor, LeaseNs: int64(lease)}, false); err != nil {
		return nil, err
	}
	return connect.NewResponse(&seqpb.ExtendResponse{}), nil
}

// Read streams the group's released output after `after`, then follows
// it through the hub's Released notes until the client goes (or the
// server shuts down: UNAVAILABLE, resume elsewhere from the last seq
// seen). Like the SSE stream it waits for a group nobody published to
// yet.
func (a *API) Read(ctx context.Context, req *connect.Request[seqpb.ReadRequest], out *connect.ServerStream[seqpb.OutputMessage]) error {
	m := req.Msg
	if err := checkNameErr("group name", m.Group, MaxNameLen); err != nil {
		return err
	}
	if m.After > 1<<63-1 {
		return grpcErr(connect.CodeInvalidArgument, "after must be at most %d, got %d", int64(1<<63-1), m.After)
	}
	// Registered before the first read, so a release between the read
	// and the wait is not missed.
	wt := a.hub.waiters.AddStream(outputKey(m.Group))
	if wt == nil {
		return api.GRPCRetryError(connect.CodeResourceExhausted, a.hub.refusedMsg()+" (RetryInfo)", a.hub.waiters.RefusedWait())
	}
	defer a.hub.waiters.Remove(outputKey(m.Group), wt)
	// Headers now: a gRPC client's call returns only once they arrive,
	// and the group may have nothing released for a long time.
	if err := out.Send(nil); err != nil {
		return err
	}
	st := api.StreamOf(ctx)
	after := m.After
	for {
		o, err := a.readPage(ctx, m.Group, after, maxReadLimit)
		if err != nil {
			if a.shuttingDown() {
				return errShuttingDown
			}
			return api.GRPCEngineError(err)
		}
		if err := a.sendPage(ctx, st, out, o.Messages); err != nil {
			if errors.Is(err, api.ErrStreamBusy) {
				return api.GRPCRetryError(connect.CodeResourceExhausted, fmt.Sprintf("%v; resume with after=%d", err, after), api.PredictedWait(err))
			}
			return err
		}
		if n := len(o.Messages); n > 0 {
			after = o.Messages[n-1].Seq
			if after < o.Position {
				continue // more is there already
			}
		}
		select {
		case <-wt.C():
		case <-ctx.Done():
			return api.GRPCEngineError(ctx.Err())
		case <-a.done:
			if st != nil {
				st.Ending(api.EndShutdown)
			}
			return grpcErr(connect.CodeUnavailable, "the server is shutting down; resume with after=%d", after)
		}
	}
}

// sendPage sends one page of output, reserved from the server's stream
// budget and within the stall timeout (when served through GRPCHandler).
func (a *API) sendPage(ctx context.Context, st *api.Stream, out *connect.ServerStream[seqpb.OutputMessage], ms []Message) error {
	send := func() error {
		for i := range ms {
			if err := out.Send(&seqpb.OutputMessage{Message: messagePB(&ms[i])}); err != nil {
				return err
			}
		}
		return nil
	}
	if st == nil || len(ms) == 0 {
		return send()
	}
	if err := st.Reserve(ctx, pageCost(ms)); err != nil {
		return err
	}
	return st.Send(send)
}

func (a *API) Commit(ctx context.Context, req *connect.Request[seqpb.CommitRequest]) (*connect.Response[seqpb.CommitResponse], error) {
	m := req.Msg
	if err := checkNameErr("group name", m.Group, MaxNameLen); err != nil {
		return nil, err
	}
	if err := checkNameErr("consumer", m.Consumer, MaxIDLen); err != nil {
		return nil, err
	}
	if _, err := a.doGRPC(ctx, m.Group, &Commit{Group: m.Group, Consumer: m.Consumer, Position: m.Position}, false); err != nil {
		return nil, err
	}
	return connect.NewResponse(&seqpb.CommitResponse{}), nil
}

// GetGroup maps Info to the proto's counts: every seq up to the released
// position was a message, and above it every slot that is not a gap is
// one, so published is exact even after purging. gap_at is, as the
// proto says, the lowest seq not yet processed: the one after the
// released position while anything is unreleased (a missing client seq
// or a message still pending or leased).
func (a *API) GetGroup(ctx context.Context, req *connect.Request[seqpb.GetGroupRequest]) (*connect.Response[seqpb.GetGroupResponse], error) {
	m := req.Msg
	if err := checkNameErr("group name", m.Group, MaxNameLen); err != nil {
		return nil, err
	}
	in, err := a.info(ctx, m.Group)
	if err != nil {
		return nil, api.GRPCEngineError(err)
	}
	if in == nil {
		return nil, grpcErr(connect.CodeNotFound, "no group %q", m.Group)
	}
	r := &seqpb.GetGroupResponse{Group: in.Name, Published: in.Position + uint64(in.Pending+in.Leased+in.Processed),
		Leased: uint64(in.Leased), Waiting: uint64(in.Processed), Released: in.Position,
		Consumers: make([]*seqpb.Consumer, len(in.Consumers))}
	if in.Last > in.Position {
		r.GapAt = in.Position + 1
	}
	for i, c := range in.Consumers {
		r.Consumers[i] = &seqpb.Consumer{Name: c.Name, Position: c.Position}
	}
	return connect.NewResponse(r), nil
}

func (a *API) DeleteGroup(ctx context.Context, req *connect.Request[seqpb.DeleteGroupRequest]) (*connect.Response[seqpb.DeleteGroupResponse], error) {
	m := req.Msg
	if err := checkNameErr("group name", m.Group, MaxNameLen); err != nil {
		return nil, err
	}
	res, err := a.dropGroupRaw(ctx, m.Group)
	if err != nil {
		return nil, api.GRPCEngineError(err)
	}
	if err := refusedErr(res, false); err != nil {
		return nil, err
	}
	return connect.NewResponse(&seqpb.DeleteGroupResponse{}), nil
}
