package server

import (
	"context"
	"net/http"
	"time"

	"github.com/surge-run/surge/internal/cluster"
	"github.com/surge-run/surge/internal/tracing"
)

// traceFlushTimeout bounds how long stopping waits for the exporter to
// send the spans it still holds.
const traceFlushTimeout = 5 * time.Second

// startTracing starts the OTLP exporter if tracing is on; off, nothing of
// it is installed.
func (s *Server) startTracing(ctx context.Context) error {
	s.tracer = s.cfg.Tracer
	if s.tracer != nil {
		s.reg.MustRegister(s.tracer.Collectors()...)
		return nil
	}
	if !s.cfg.Tracing.Enabled() {
		return nil
	}
	t, err := tracing.Start(ctx, s.cfg.Tracing)
	if err != nil {
		return err
	}
	s.tracer = t
	s.reg.MustRegister(t.Collectors()...)
	s.undo = append(s.undo, func() {
		fctx, cancel := context.WithTimeout(context.Background(), traceFlushTimeout)
		defer cancel()
		if err := t.Shutdown(fctx); err != nil {
			s.logger.Warn("flushing traces", "err", err)
		}
	})
	s.logger.Info("OpenTelemetry tracing on", "sample_ratio", s.cfg.Tracing.SampleRatio)
	return nil
}

// handler is what the listener serves: the routes, in a server span each
// when tracing is on, but the calls between cluster nodes, whose work
// is traced in the trace of the edge request that caused it.
func (s *Server) handler() http.Handler {
	if s.tracer == nil {
		return s.mux
	}
	return s.tracer.Handler(s.mux, cluster.CallPath)
}
