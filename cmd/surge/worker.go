package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/surge-run/surge/client/jobclient"
	"github.com/surge-run/surge/internal/clientconn"
	"github.com/surge-run/surge/internal/tracing"
)

// Output kept of a job's command: the tail, where a failure's cause
// usually is. stderr is kept small enough that the error message fits the
// server's 4 KiB limit.
const (
	maxResultBytes = 64 << 10
	maxStderrBytes = 3 << 10
)

// workerClientOptions are the jobclient options of --ca-file and --token.
func workerClientOptions(server string, o clientconn.Options) ([]jobclient.Option, error) {
	https, err := clientconn.IsHTTPS(server)
	if err != nil {
		return nil, usageErrorf("--server %v", err)
	}
	opts := []jobclient.Option{jobclient.WithToken(o.Token)}
	if !https {
		if o.CAFile != "" {
			return nil, usageErrorf("--ca-file %s is for https:// servers, and --server %s is http://", o.CAFile, server)
		}
		return opts, nil
	}
	cfg, err := clientconn.TLSConfig(o.CAFile)
	if err != nil {
		return nil, err
	}
	return append(opts, jobclient.WithTLSConfig(cfg)), nil
}

// workerLong is what `surge worker --help` says.
const workerLong = `surge worker takes jobs from a Surge server's queues over a gRPC stream and runs each
payload {"command": ["prog", "arg", ...]} as a child process (no shell), with the job's TTL
as its timeout. The job's result is the command's stdout (its last 64 KiB); a non-zero exit
fails the job with the exit status and the tail of stderr.

Without --id the worker's id is <host>-<hash>-<n>: the hostname, a hash of --server
and the queues, and the first free slot n (a lock file in --state-dir). A restarted
worker gets its old id back when no lower slot is free, so the server gives back at once
the jobs its old process held; workers running at once on one host get different ids.
Give --id for an id that never moves.

SIGTERM or SIGINT drains: no new jobs, running ones finish and are reported, then the
worker deregisters and exits. A second signal kills the running commands and exits now
(their jobs go back to the queue).`

func newWorkerCmd() *cobra.Command {
	env := newEnvVars()
	var (
		cfg      jobclient.WorkerConfig
		server   string
		queues   string
		stateDir string
		conn     clientconn.Options
	)
	cmd := &cobra.Command{
		Use:   "worker",
		Short: `Run jobs whose payload is {"command": ["prog", "arg", ...]} as child processes`,
		Long:  workerLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := env.check(cmd); err != nil {
				return err
			}
			cfg.Queues = append(cfg.Queues, splitQueues(queues)...)
			log := slog.New(slog.NewTextHandler(os.Stderr, nil))
			cfg.Logger = log
			if cfg.ID == "" {
				host, _ := os.Hostname()
				id, release, err := claimWorkerID(stateDir, host, server, cfg.Queues)
				if err != nil {
					return fmt.Errorf("choosing a worker id (give one with --id, or a writable --state-dir): %w", err)
				}
				defer release()
				cfg.ID = id
			}
			copts, err := workerClientOptions(server, conn)
			if err != nil {
				return err
			}
			tr, err := startWorkerTracing(log)
			if err != nil {
				return err
			}
			defer tr.Shutdown(context.Background())
			return runDraining(newCommandWorker(jobclient.New(server, copts...), cfg, tr), log)
		},
	}
	f := cmd.Flags()
	f.StringVar(&server, "server", envOr("SURGE_SERVER", "http://127.0.0.1:8080"), "the Surge server's URL (SURGE_SERVER)")
	f.StringVar(&queues, "queues", envOr("SURGE_QUEUES", "default"), "queues to take jobs from, comma-separated (SURGE_QUEUES)")
	f.IntVar(&cfg.Concurrency, "concurrency", runtime.NumCPU(), env.help("concurrency", "SURGE_CONCURRENCY", "jobs run at once"))
	f.StringVar(&cfg.ID, "id", envOr("SURGE_WORKER_ID", ""), "the worker's id; empty: <host>-<hash of server and queues>-<first free slot>, the same after a restart (SURGE_WORKER_ID)")
	f.StringVar(&stateDir, "state-dir", envOr("SURGE_WORKER_STATE_DIR", defaultStateDir()), "where the slot locks of default worker ids are kept (SURGE_WORKER_STATE_DIR)")
	clientFlags(f, &conn)
	f.DurationVar(&cfg.Heartbeat, "heartbeat", 5*time.Second, env.help("heartbeat", "SURGE_HEARTBEAT", "interval between heartbeats; shorter than the server's --job-lease"))
	env.read(cmd)
	return cmd
}

// splitQueues reads --queues: names separated by commas, blanks around
// them and empty names dropped.
func splitQueues(queues string) []string {
	var out []string
	for q := range strings.SplitSeq(queues, ",") {
		if q = strings.TrimSpace(q); q != "" {
			out = append(out, q)
		}
	}
	return out
}

// runDraining runs w until SIGTERM or SIGINT, which drains it (no new
// jobs, running ones finish); a second signal kills the running commands.
func runDraining(w *jobclient.Worker, log *slog.Logger) error {
	ctx, drain := context.WithCancel(context.Background())
	defer drain()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
	defer signal.Stop(sigs)
	go func() {
		s := <-sigs
		log.Info("draining: finishing running jobs; signal again to stop now", "signal", s.String())
		drain()
		s = <-sigs
		log.Warn("stopping now: killing running jobs", "signal", s.String())
		w.StopNow()
	}()
	return w.Run(ctx)
}

// newCommandWorker is the worker `surge worker` runs: every queue's jobs
// are commands.
func newCommandWorker(c *jobclient.Client, cfg jobclient.WorkerConfig, tr *tracing.Tracing) *jobclient.Worker {
	w := jobclient.NewWorker(c, cfg)
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	jobclient.Handle(w, "", func(ctx context.Context, job *jobclient.Job[[]byte]) ([]byte, error) {
		return runJob(ctx, log, tr, job)
	})
	return w
}

// workerPayload is the payload the stock worker understands (jq's).
type workerPayload struct {
	Command []string `json:"command"`
}

func parseCommand(payload []byte) ([]string, error) {
	var p workerPayload
	if err := json.Unmarshal(payload, &p); err != nil {
		return nil, fmt.Errorf(`payload is not JSON {"command": ["prog", "arg", ...]}: %v`, err)
	}
	if len(p.Command) == 0 || p.Command[0] == "" {
		return nil, errors.New(`payload has no command: want JSON {"command": ["prog", "arg", ...]}`)
	}
	return p.Command, nil
}

func runJob(ctx context.Context, log *slog.Logger, tr *tracing.Tracing, job *jobclient.Job[[]byte]) (_ []byte, err error) {
	start := time.Now()
	if tr != nil {
		var end func(error)
		job.Traceparent, job.Tracestate, end = tr.JobSpan(ctx, job.ID, job.Queue, job.Traceparent, job.Tracestate)
		defer func() { end(err) }()
	}
	argv, err := parseCommand(job.Payload)
	if err != nil {
		log.Info("job refused", "job_id", job.ID, "queue", job.Queue, "err", err)
		return nil, err
	}
	out, err := runCommand(ctx, argv, traceEnv(job))
	attrs := []any{"job_id", job.ID, "queue", job.Queue, "command", argv[0], "duration", time.Since(start).Round(time.Millisecond)}
	if err != nil {
		if cause := context.Cause(ctx); cause != nil {
			attrs = append(attrs, "stopped", cause.Error())
		}
		log.Info("job failed", append(attrs, "err", err)...)
		return nil, err
	}
	log.Info("job done", append(attrs, "stdout_bytes", len(out))...)
	return out, nil
}

// runCommand runs argv without a shell in a process group of its own, so
// that ending ctx (cancel, TTL, stop now) kills the command and whatever
// it started with SIGKILL. It returns the tail of stdout, or an error with
// the exit status and the tail of stderr.
func runCommand(ctx context.Context, argv []string, env []string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// A killed command's background children may hold its pipes open;
	// stop waiting for them soon after the kill.
	cmd.WaitDelay = time.Second
	stdout, stderr := &tailBuffer{max: maxResultBytes}, &tailBuffer{max: maxStderrBytes}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	err := cmd.Run()
	if cmd.Process != nil {
		// Nothing a job started outlives it. ESRCH (none left) is the
		// usual answer.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return nil, fmt.Errorf("%v; stderr: %s", err, msg)
		}
		return nil, err
	}
	return stdout.Bytes(), nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	buf       bytes.Buffer
	max       int
	truncated bool
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) >= t.max {
		t.buf.Reset()
		p = p[len(p)-t.max:]
		t.truncated = true
	} else if over := t.buf.Len() + len(p) - t.max; over > 0 {
		t.buf.Next(over)
		t.truncated = true
	}
	t.buf.Write(p)
	if t.buf.Cap() > 4*t.max {
		// Next only moves the read offset: copy the tail into a fresh
		// buffer now and then so memory stays bounded.
		b := bytes.Clone(t.buf.Bytes())
		t.buf = *bytes.NewBuffer(b)
	}
	return n, nil
}

func (t *tailBuffer) Bytes() []byte { return t.buf.Bytes() }

func (t *tailBuffer) String() string {
	if t.truncated {
		return "…" + t.buf.String()
	}
	return t.buf.String()
}
