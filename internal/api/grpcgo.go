package api

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"connectrpc.com/connect"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
)

// The grpc-go edge (--grpc-addr) serves the same handlers as the connect
// one: a workload writes each RPC once, as a connect handler, and these
// adapt it to grpc-go's service interfaces, so both transports run the
// same code and give the same codes, messages, details and trailers.

// Unary runs the connect handler h for a grpc-go call: the reply's headers
// and trailers become the call's, and an error its status (GRPCError).
func Unary[Req, Res any](ctx context.Context, req *Req, h func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error)) (*Res, error) {
	res, err := h(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, GRPCError(ctx, err)
	}
	if md := HeaderMetadata(res.Header()); md != nil {
		_ = grpc.SetHeader(ctx, md)
	}
	if md := HeaderMetadata(res.Trailer()); md != nil {
		_ = grpc.SetTrailer(ctx, md)
	}
	return res.Msg, nil
}

// GRPCError is err as grpc-go's status: the connect code (the two share
// their numbering), message and details, with the error's metadata
// (grpc-retry-pushback-ms, Retry-After) set as the call's trailers.
func GRPCError(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	st := &spb.Status{Code: int32(connect.CodeOf(err)), Message: err.Error()}
	if ce := (*connect.Error)(nil); errors.As(err, &ce) {
		st.Message = ce.Message()
		for _, d := range ce.Details() {
			st.Details = append(st.Details, &anypb.Any{TypeUrl: "type.googleapis.com/" + d.Type(), Value: d.Bytes()})
		}
		if md := HeaderMetadata(ce.Meta()); md != nil {
			_ = grpc.SetTrailer(ctx, md)
		}
	}
	return status.ErrorProto(st)
}

// HeaderMetadata is h as gRPC metadata (lower-case keys), nil if empty. The
// protocol's own headers are grpc-go's to write.
func HeaderMetadata(h http.Header) metadata.MD {
	var md metadata.MD
	for k, v := range h {
		lk := strings.ToLower(k)
		if lk == "content-type" || lk == "grpc-status" || lk == "grpc-message" || lk == "grpc-status-details-bin" {
			continue
		}
		if md == nil {
			md = metadata.MD{}
		}
		md[lk] = v
	}
	return md
}

// Admit puts h behind what the server's own handler is behind: the gate
// (Limits.Gate) and the in-flight admission, with the same slots, waiting
// room and exemptions. The grpc-go edge runs each call through it as a
// request carrying the call's path and metadata, so a call is refused,
// queued and counted as the same call on --addr would be.
func (s *Server) Admit(h http.Handler) http.Handler {
	if s.err != nil {
		return h
	}
	l := s.inflight
	return s.lim.gate(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { l.serve(w, r, h) }))
}

// CallContext is ctx with the server's budgets, as every request on the
// server's own listener finds them (streams, bodies).
func (s *Server) CallContext(ctx context.Context) context.Context {
	if s.err != nil {
		return ctx
	}
	return withBodies(withStreams(ctx, s.streams), s.bodies)
}

// TryAdmit admits a call at path at once when the admission would without
// a wait: the path is exempt, or a slot is free and nobody waits. held
// says whether it took a slot, which ReleaseSlot gives back. A call it
// does not admit goes through Admit, which queues or refuses it. The
// grpc-go edge uses it when there is no gate and no tracing, so that a
// call needs no request built for it.
func (s *Server) TryAdmit(path string) (held, ok bool) {
	if s.err != nil {
		return false, true
	}
	l := s.inflight
	if l.isExempt(path) {
		return false, true
	}
	if l.queued.Load() != 0 || !l.tryTake() {
		return false, false
	}
	return true, true
}

// Bodies is the server's body budget (--max-body-memory), which the
// grpc-go edge's calls share with the bodies read on its own listener.
func (s *Server) Bodies() *BodyBudget {
	if s.bodies == nil {
		return defaultBodies
	}
	return s.bodies
}

// ReleaseSlot gives back a slot TryAdmit took.
func (s *Server) ReleaseSlot() { s.inflight.release() }
