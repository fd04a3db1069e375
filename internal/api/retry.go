package api

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/durationpb"
)

// MinRetryDelay is the shortest pause a refusal asks for. A prediction
// below it is noise (a few queued requests), and HTTP's Retry-After
// counts whole seconds anyway.
const MinRetryDelay = time.Second

// RetryDelay is the pause a refusal predicting wait asks for: wait
// rounded up to the millisecond, at least MinRetryDelay.
func RetryDelay(wait time.Duration) time.Duration {
	return max(MinRetryDelay, (wait + time.Millisecond - 1).Truncate(time.Millisecond))
}

// RetryAfterSeconds is d in whole seconds for a Retry-After header:
// rounded up, at least 1.
func RetryAfterSeconds(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}

// SetRetryAfter sets Retry-After from a predicted wait (at least 1 s);
// Error keeps it.
func SetRetryAfter(w http.ResponseWriter, d time.Duration) {
	w.Header().Set("Retry-After", strconv.Itoa(RetryAfterSeconds(d)))
}

// Headers a gRPC refusal carries its delay in, besides the RetryInfo
// detail.
const (
	// PushbackHeader is the trailer grpc-go's retry policy honours: it
	// waits this many milliseconds before its next attempt.
	PushbackHeader = "Grpc-Retry-Pushback-Ms"
	// RetryAfterHeader is HTTP's; in a gRPC error's metadata it is an
	// HTTP header of Connect unary and trailers-only gRPC-Web answers.
	RetryAfterHeader = "Retry-After"
)

// GRPCRetryError is a gRPC refusal that tells the client when to come
// back: wait (the predicted wait; see RetryDelay) as a google.rpc.RetryInfo
// detail (read by Google's and Envoy's clients and by anyone decoding
// grpc-status-details-bin), as the grpc-retry-pushback-ms trailer that
// grpc-go's retry policy honours, and as Retry-After in whole seconds.
func GRPCRetryError(code connect.Code, msg string, wait time.Duration) *connect.Error {
	d := RetryDelay(wait)
	err := connect.NewError(code, errors.New(msg))
	if detail, derr := connect.NewErrorDetail(&errdetails.RetryInfo{RetryDelay: durationpb.New(d)}); derr == nil {
		err.AddDetail(detail)
	}
	err.Meta().Set(PushbackHeader, strconv.FormatInt(d.Milliseconds(), 10))
	err.Meta().Set(RetryAfterHeader, strconv.Itoa(RetryAfterSeconds(d)))
	return err
}

// GRPCRetryDelay is the delay a gRPC error asks for in its RetryInfo
// detail, and whether it has one.
func GRPCRetryDelay(err error) (time.Duration, bool) {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return 0, false
	}
	for _, d := range ce.Details() {
		v, verr := d.Value()
		if ri, ok := v.(*errdetails.RetryInfo); ok && verr == nil {
			return ri.GetRetryDelay().AsDuration(), true
		}
	}
	return 0, false
}

// PredictedWait is the wait a refusal predicts for a retry, found as a
// RetryAfter method on err or an error it wraps (the engine's overloads,
// the body and stream budgets' refusals); 0 if it predicts none.
func PredictedWait(err error) time.Duration {
	var p interface{ RetryAfter() time.Duration }
	if errors.As(err, &p) {
		return p.RetryAfter()
	}
	return 0
}
