package main

import (
	"io"
	"log/slog"
	"os"

	"github.com/spf13/pflag"

	"github.com/surge-run/surge/internal/server"
	"github.com/surge-run/surge/internal/tracing"
)

// obsFlags are `surge serve`'s tracing and log flags.
type obsFlags struct {
	logFormat string
	out       io.Writer // where the log goes: stderr (tests set it)
}

func addObsFlags(f *pflag.FlagSet, env *envVars, cfg *server.Config) *obsFlags {
	o := &obsFlags{out: os.Stderr}
	f.BoolVar(&cfg.Tracing.On, "otel", false, env.help("otel", "SURGE_OTEL", "export OpenTelemetry traces over OTLP, configured by the standard OTEL_EXPORTER_OTLP_* variables (e.g. OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318; protocol http/protobuf, or grpc); also on when OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_TRACES_EXPORTER=otlp is set, off with OTEL_SDK_DISABLED=true. See docs/OBSERVABILITY.md"))
	f.Float64Var(&cfg.Tracing.SampleRatio, "trace-sample-ratio", tracing.RatioFromEnv, env.help("trace-sample-ratio", "SURGE_TRACE_SAMPLE_RATIO", "share of the traces started here that are sampled, 0 to 1 (0.01: 1 %); a request with a traceparent follows its caller's decision (parentbased_traceidratio). -1 takes OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG (default: every trace)"))
	f.StringVar(&o.logFormat, "log-format", tracing.LogText, env.help("log-format", "SURGE_LOG_FORMAT", "text or json (one JSON object a line; lines about a traced request carry its trace_id)"))
	return o
}

// apply makes the logger of --log-format the server's and the process's
// default (which handlers log panics through).
func (o *obsFlags) apply(cfg *server.Config) error {
	lg, err := tracing.NewLogger(o.out, o.logFormat)
	if err != nil {
		return usageError{err}
	}
	cfg.Logger = lg
	slog.SetDefault(lg)
	return nil
}
