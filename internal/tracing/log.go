package tracing

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// Log formats of --log-format.
const (
	LogText = "text"
	LogJSON = "json"
)

// NewLogger writes to w in format (LogText or LogJSON); a line logged with
// the context of a traced request (slog's *Context calls) carries its
// trace_id and span_id, so that logs and traces meet.
func NewLogger(w io.Writer, format string) (*slog.Logger, error) {
	var h slog.Handler
	switch format {
	case LogText:
		h = slog.NewTextHandler(w, nil)
	case LogJSON:
		h = slog.NewJSONHandler(w, nil)
	default:
		return nil, fmt.Errorf("--log-format %q (SURGE_LOG_FORMAT): want %s or %s", format, LogText, LogJSON)
	}
	return slog.New(traceIDs{h}), nil
}

// traceIDs adds the trace of the record's context to the record.
type traceIDs struct{ slog.Handler }

func (t traceIDs) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return t.Handler.Handle(ctx, r)
}

func (t traceIDs) WithAttrs(as []slog.Attr) slog.Handler { return traceIDs{t.Handler.WithAttrs(as)} }

func (t traceIDs) WithGroup(name string) slog.Handler { return traceIDs{t.Handler.WithGroup(name)} }
