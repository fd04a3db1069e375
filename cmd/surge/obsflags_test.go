package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/surge-run/surge/internal/server"
)

// obsCmd is a command with only the tracing and log flags, as serve has
// them, read from the environment then args.
func obsCmd(t *testing.T, args ...string) (*server.Config, *obsFlags, error) {
	t.Helper()
	cfg := &server.Config{}
	env := newEnvVars()
	cmd := &cobra.Command{Use: "serve"}
	o := addObsFlags(cmd.Flags(), env, cfg)
	env.read(cmd)
	if err := cmd.Flags().Parse(args); err != nil {
		return nil, nil, err
	}
	return cfg, o, env.check(cmd)
}

// The tracing and log flags: off and text by default, from SURGE_*
// variables or the command line, and a bad value refused naming its flag.
func TestServeObservabilityFlags(t *testing.T) {
	defer slog.SetDefault(slog.Default())
	cfg, o, err := obsCmd(t)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Tracing.On || cfg.Tracing.SampleRatio != -1 || o.logFormat != "text" {
		t.Errorf("defaults: tracing %+v, log format %q; want off, -1, text", cfg.Tracing, o.logFormat)
	}

	t.Setenv("SURGE_LOG_FORMAT", "json")
	t.Setenv("SURGE_TRACE_SAMPLE_RATIO", "0.01")
	cfg, o, err = obsCmd(t, "--otel")
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Tracing.On || cfg.Tracing.SampleRatio != 0.01 {
		t.Errorf("tracing %+v, want on at 0.01", cfg.Tracing)
	}
	var buf bytes.Buffer
	o.out = &buf
	if err := o.apply(cfg); err != nil {
		t.Fatal(err)
	}
	cfg.Logger.Info("x")
	if !strings.HasPrefix(buf.String(), "{") {
		t.Errorf("--log-format json wrote %q", buf.String())
	}

	t.Setenv("SURGE_LOG_FORMAT", "xml")
	cfg, o, err = obsCmd(t)
	if err == nil {
		err = o.apply(cfg)
	}
	if err == nil || !strings.Contains(err.Error(), "--log-format") {
		t.Errorf("SURGE_LOG_FORMAT=xml: %v, want an error naming --log-format", err)
	}
}
