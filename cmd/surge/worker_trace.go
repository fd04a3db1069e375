package main

import (
	"context"
	"log/slog"

	"github.com/surge-run/surge/client/jobclient"
	"github.com/surge-run/surge/internal/tracing"
)

// startWorkerTracing exports the spans of job runs when the standard
// OTEL_* variables turn tracing on (as for `surge serve`, without its
// flags); nil when they do not. Either way a traced job's command gets
// its context in TRACEPARENT.
func startWorkerTracing(log *slog.Logger) (*tracing.Tracing, error) {
	cfg := tracing.Config{SampleRatio: tracing.RatioFromEnv}
	if !cfg.Enabled() {
		return nil, nil
	}
	tr, err := tracing.Start(context.Background(), cfg)
	if err != nil {
		return nil, err
	}
	log.Info("OpenTelemetry tracing of job runs on")
	return tr, nil
}

// traceEnv is the environment that puts a job's command in its trace:
// TRACEPARENT (and TRACESTATE if any), the variables otel-cli and the
// OpenTelemetry SDKs' environment propagators read.
func traceEnv(job *jobclient.Job[[]byte]) []string {
	if job.Traceparent == "" {
		return nil
	}
	env := []string{"TRACEPARENT=" + job.Traceparent}
	if job.Tracestate != "" {
		env = append(env, "TRACESTATE="+job.Tracestate)
	}
	return env
}
