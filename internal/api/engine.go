package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	"connectrpc.com/connect"

	"github.com/surge-run/surge/internal/cmdlog"
	"github.com/surge-run/surge/internal/engine"
)

// EngineError answers an engine failure with a status a client can act on.
// busy words the 429: the engine refused the command before applying it,
// so the client can safely retry after the Retry-After it carries: the
// partition's predicted wait (engine.RetryAfter), at least 1 s. A command
// too large for the log is 413, naming the limit.
func EngineError(w http.ResponseWriter, err error, busy string) int {
	switch {
	case errors.Is(err, engine.ErrOverloaded):
		SetRetryAfter(w, engine.RetryAfter(err))
		return Error(w, http.StatusTooManyRequests, busy)
	case errors.Is(err, engine.ErrTooLarge):
		return Error(w, http.StatusRequestEntityTooLarge, tooLargeMsg(err))
	case errors.Is(err, engine.ErrClosed), errors.Is(err, engine.ErrFailed),
		errors.Is(err, engine.ErrNotOwner), errors.Is(err, engine.ErrOutcomeUnknown):
		return Error(w, http.StatusServiceUnavailable, err.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return Error(w, http.StatusServiceUnavailable, "request cancelled before it finished")
	}
	return Error(w, http.StatusInternalServerError, err.Error())
}

// GRPCEngineError is EngineError for gRPC handlers: overload and a command
// too large for the log are RESOURCE_EXHAUSTED (the command was refused
// before it was applied, so a retry is safe; an overload carries the
// partition's predicted wait, see GRPCRetryError), a failed or closing
// node and a partition moving between nodes UNAVAILABLE (retry, elsewhere
// if possible; all but a failed log's with the floor's RetryInfo).
func GRPCEngineError(err error) error {
	switch {
	case errors.Is(err, engine.ErrOverloaded):
		return GRPCRetryError(connect.CodeResourceExhausted, "the server is overloaded: nothing was done; retry after the RetryInfo delay", engine.RetryAfter(err))
	case errors.Is(err, engine.ErrTooLarge):
		return connect.NewError(connect.CodeResourceExhausted, errors.New(tooLargeMsg(err)))
	case errors.Is(err, engine.ErrFailed):
		return connect.NewError(connect.CodeUnavailable, errors.New("the command log failed; this node refuses all requests until it is restarted"))
	case errors.Is(err, engine.ErrClosed):
		return GRPCRetryError(connect.CodeUnavailable, "the server is shutting down; retry", MinRetryDelay)
	case errors.Is(err, engine.ErrNotOwner), errors.Is(err, engine.ErrOutcomeUnknown):
		// As HTTP's 503 with Retry-After 1: the partition has a new
		// owner within a session timeout, and a client told nothing
		// retries at once, or not at all.
		return GRPCRetryError(connect.CodeUnavailable, err.Error(), MinRetryDelay)
	case errors.Is(err, context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	case errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeCanceled, err)
	}
	return connect.NewError(connect.CodeInternal, err)
}

// tooLargeMsg words engine.ErrTooLarge: the engine's message names the
// size and the limit.
func tooLargeMsg(err error) string {
	return fmt.Sprintf("request too large: %v. A command may take at most %d bytes in the log; nothing was done: send less in one request",
		err, cmdlog.MaxEntryBytes)
}

// BodyPool holds the buffers request bodies are read into.
var BodyPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// ReadJSON reads a size-limited JSON body into v (CheckBody, room in the
// body budget, then DecodeJSON); it returns the status it answered with,
// or 0.
func ReadJSON(w http.ResponseWriter, r *http.Request, limit int64, v any) int {
	if st := CheckBody(w, r, limit); st != 0 {
		return st
	}
	if st := HoldBody(w, r, limit); st != 0 {
		return st
	}
	buf := BodyPool.Get().(*bytes.Buffer)
	buf.Reset()
	defer BodyPool.Put(buf)
	if _, err := buf.ReadFrom(LimitedBody(w, r, limit)); err != nil {
		return BodyError(w, err)
	}
	if msg := DecodeJSON(buf.Bytes(), v); msg != "" {
		return Error(w, http.StatusBadRequest, msg)
	}
	return 0
}

// LimitedBody is r's body, of which at most limit bytes will be read: as
// http.MaxBytesReader, but a body whose declared length is within limit
// is r.Body itself, which every server here already ends at that length
// (net/http's HTTP/1.1 and HTTP/2 servers and the lean ones alike), so a
// reservation's body needs no reader of its own allocated.
func LimitedBody(w http.ResponseWriter, r *http.Request, limit int64) io.Reader {
	if r.ContentLength >= 0 && r.ContentLength <= limit {
		return r.Body
	}
	return http.MaxBytesReader(serverWriter(w), r.Body, limit)
}

// serverWriter is the server's own writer under wrappers that Unwrap (as
// http.ResponseController does): only it can tell net/http to close the
// connection after a body over the limit.
func serverWriter(w http.ResponseWriter) http.ResponseWriter {
	for {
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return w
		}
		w = u.Unwrap()
	}
}
