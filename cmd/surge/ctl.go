package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/surge-run/surge/internal/clientconn"
	"github.com/surge-run/surge/internal/jqpb"
	"github.com/surge-run/surge/internal/jqpb/jqpbconnect"
)

// ctlOptions are the flags every `surge ctl` command shares.
type ctlOptions struct {
	server  string
	json    bool
	timeout time.Duration
	conn    clientconn.Options // --ca-file, --token
}

// ctlClients are the jq services a command calls; they are built per
// command so that --server and --timeout apply however they were given.
type ctlClients struct {
	jobs  jqpbconnect.JobServiceClient
	admin jqpbconnect.AdminServiceClient
}

// clients speaks gRPC, as jq-ctl does, so that `surge ctl` also works
// against a jq server or anything behind a gRPC-only proxy. Cleartext
// servers get HTTP/2 without TLS (h2c, what `surge serve` listens for);
// https ones get ordinary HTTP/2 over TLS, trusting --ca-file.
func (o *ctlOptions) clients() (ctlClients, error) {
	if _, err := clientconn.IsHTTPS(o.server); err != nil {
		return ctlClients{}, usageErrorf("--server %v", err)
	}
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	rt, err := clientconn.Configure(&http.Transport{Protocols: p}, o.server, true, o.conn)
	if err != nil {
		return ctlClients{}, usageError{err}
	}
	hc := &http.Client{Transport: rt}
	base := strings.TrimRight(o.server, "/")
	return ctlClients{
		jobs:  jqpbconnect.NewJobServiceClient(hc, base, connect.WithGRPC()),
		admin: jqpbconnect.NewAdminServiceClient(hc, base, connect.WithGRPC()),
	}, nil
}

// usageError is a mistake on the command line rather than a failed call:
// main exits 2 for it, like other CLIs, so scripts can tell the two apart.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// usageArgs marks an argument-count error as a usage error.
func usageArgs(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return usageError{err}
		}
		return nil
	}
}

// noSubcommand is the Args of a command that only groups others: an
// unknown word is a usage error with suggestions, not a silent help page.
func noSubcommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += "; did you mean " + strings.Join(s, " or ") + "?"
	}
	return usageError{errors.New(msg)}
}

// groupCmd is a command that only holds subcommands; run bare, it prints
// its help.
func groupCmd(use, short string) *cobra.Command {
	return &cobra.Command{
		Use: use, Short: short, Args: noSubcommand, SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
}

// rpcError turns a failed call into "CODE: message", the gRPC code as
// grpcurl and the jq docs spell it, so an operator can look it up.
func rpcError(err error) error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return fmt.Errorf("%s: %s", strings.ToUpper(ce.Code().String()), ce.Message())
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("DEADLINE_EXCEEDED: %v", err)
	}
	return err
}

// msg unwraps a connect response so a command's call is one line.
func msg[T any](res *connect.Response[T], err error) (*T, error) {
	if err != nil {
		return nil, err
	}
	return res.Msg, nil
}

// ctlRun makes one call and prints its response: as protojson with
// --json (every field, zero values included, so a script need not know
// proto3's defaults), else as text.
func ctlRun[T proto.Message](cmd *cobra.Command, o *ctlOptions, call func(context.Context, ctlClients) (T, error), text func(io.Writer, T) error) error {
	c, err := o.clients()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), o.timeout)
	defer cancel()
	res, err := call(ctx, c)
	if err != nil {
		return rpcError(err)
	}
	w := cmd.OutOrStdout()
	if o.json {
		b, err := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(res)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	return text(w, res)
}

func newCtlCmd() *cobra.Command {
	o := &ctlOptions{}
	ctl := groupCmd("ctl", "Operate a Surge server's job queues over gRPC (jq-ctl's commands)")
	ctl.Long = `Operates the job queues of a Surge server (or any server of the jq gRPC API)
with jq-ctl's commands. Calls go over gRPC (cleartext HTTP/2 for http://
servers). Output is text tables, or with --json the response message as one
protojson object per command. Errors print the gRPC code and message and exit
1; command-line mistakes exit 2.`
	pf := ctl.PersistentFlags()
	pf.StringVar(&o.server, "server", envOr("SURGE_SERVER", "http://127.0.0.1:8080"), "server base URL (SURGE_SERVER)")
	pf.BoolVar(&o.json, "json", false, "print the response as protojson, one object per command")
	pf.DurationVar(&o.timeout, "timeout", 10*time.Second, "deadline for the call")
	clientFlags(pf, &o.conn)
	ctl.AddCommand(ctlStatusCmd(o), ctlJobCmd(o), ctlQueueCmd(o), ctlWorkerCmd(o))
	addOpsCommands(ctl, o)
	return ctl
}

// leaf builds a command that takes exactly the named arguments.
func leaf(use, short string, nargs int, run func(*cobra.Command, []string) error) *cobra.Command {
	return &cobra.Command{
		Use: use, Short: short, Args: usageArgs(cobra.ExactArgs(nargs)), SilenceUsage: true, RunE: run,
	}
}

func ctlStatusCmd(o *ctlOptions) *cobra.Command {
	cmd := leaf("status", "Show the server's health, workers and every queue's counts, then (Surge) the node and each workload", 0, nil)
	cmd.Long = `Shows the job queues' status (jq's GetSystemStatus; with --json, that
message alone, as jq-ctl prints it), then, from a Surge server, the node's
partitions and a summary of each workload the token may read (see surge ctl
overview --json for the node's figures as JSON).`
	w := addWatch(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := w.check(); err != nil {
			return err
		}
		once := func() error {
			err := ctlRun(cmd, o, func(ctx context.Context, c ctlClients) (*jqpb.GetSystemStatusResponse, error) {
				return msg(c.admin.GetSystemStatus(ctx, connect.NewRequest(&jqpb.GetSystemStatusRequest{})))
			}, printSystemStatus)
			if err != nil || o.json {
				return err
			}
			return printSurgeStatus(cmd, o)
		}
		if w.every == 0 {
			return once()
		}
		return watch(cmd, w, once)
	}
	return cmd
}

func ctlJobCmd(o *ctlOptions) *cobra.Command {
	job := groupCmd("job", "Submit, inspect, list, cancel and retry jobs")
	job.AddCommand(ctlJobSubmitCmd(o),
		leaf("status ID", "Show one job", 1, func(cmd *cobra.Command, args []string) error {
			return ctlRun(cmd, o, func(ctx context.Context, c ctlClients) (*jqpb.GetJobStatusResponse, error) {
				return msg(c.jobs.GetJobStatus(ctx, connect.NewRequest(&jqpb.GetJobStatusRequest{JobId: args[0]})))
			}, func(w io.Writer, r *jqpb.GetJobStatusResponse) error { return printJob(w, r.GetJob()) })
		}),
		leaf("logs ID", "Show every state change of a job", 1, func(cmd *cobra.Command, args []string) error {
			return ctlRun(cmd, o, func(ctx context.Context, c ctlClients) (*jqpb.GetJobLogsResponse, error) {
				return msg(c.jobs.GetJobLogs(ctx, connect.NewRequest(&jqpb.GetJobLogsRequest{JobId: args[0]})))
			}, func(w io.Writer, r *jqpb.GetJobLogsResponse) error { return printJobEvents(w, r.GetEvents()) })
		}),
		ctlJobListCmd(o),
		leaf("cancel ID", "Cancel a job (a running one is stopped by its worker)", 1, func(cmd *cobra.Command, args []string) error {
			return ctlRun(cmd, o, func(ctx context.Context, c ctlClients) (*jqpb.CancelJobResponse, error) {
				return msg(c.jobs.CancelJob(ctx, connect.NewRequest(&jqpb.CancelJobRequest{JobId: args[0]})))
			}, func(w io.Writer, _ *jqpb.CancelJobResponse) error {
				_, err := fmt.Fprintf(w, "cancelled job %s\n", args[0])
				return err
			})
		}),
		leaf("retry ID", "Run a FAILED or DEAD_LETTERED job again; prints its id", 1, func(cmd *cobra.Command, args []string) error {
			return ctlRun(cmd, o, func(ctx context.Context, c ctlClients) (*jqpb.RetryJobResponse, error) {
				return msg(c.jobs.RetryJob(ctx, connect.NewRequest(&jqpb.RetryJobRequest{JobId: args[0]})))
			}, func(w io.Writer, r *jqpb.RetryJobResponse) error {
				_, err := fmt.Fprintln(w, r.GetJobId())
				return err
			})
		}),
	)
	return job
}

func ctlJobSubmitCmd(o *ctlOptions) *cobra.Command {
	var (
		priority, maxRetries int32
		ttl                  time.Duration
		notBefore, key       string
		command              bool
	)
	cmd := &cobra.Command{
		Use:   "submit QUEUE [PAYLOAD | - | --command -- PROG [ARG...]]",
		Short: "Submit a job; prints its id",
		Long: `Submits a job to QUEUE and prints its id once the job is durable.
PAYLOAD is sent as given ("-" reads it from standard input; none is an empty
payload). With --command the remaining arguments are the program and its
arguments, sent as {"command": [PROG, ARG...]}, the payload surge worker runs;
put "--" before PROG when an argument starts with "-".`,
		Args:         usageArgs(cobra.MinimumNArgs(1)),
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &jqpb.SubmitJobRequest{QueueName: args[0], Priority: priority, MaxRetries: maxRetries, IdempotencyKey: key}
			var err error
			if req.Payload, err = submitPayload(cmd.InOrStdin(), args[1:], command); err != nil {
				return err
			}
			if req.TtlSeconds, err = ttlSeconds("--ttl", ttl); err != nil {
				return err
			}
			if notBefore != "" {
				t, err := parseNotBefore(notBefore, time.Now())
				if err != nil {
					return err
				}
				req.NotBefore = timestamppb.New(t)
			}
			return ctlRun(cmd, o, func(ctx context.Context, c ctlClients) (*jqpb.SubmitJobResponse, error) {
				return msg(c.jobs.SubmitJob(ctx, connect.NewRequest(req)))
			}, func(w io.Writer, r *jqpb.SubmitJobResponse) error {
				_, err := fmt.Fprintln(w, r.GetJobId())
				return err
			})
		},
	}
	f := cmd.Flags()
	f.Int32Var(&priority, "priority", 0, "0 to 9, higher runs first")
	f.Int32Var(&maxRetries, "max-retries", 0, "retries after a failure; 0 means the queue's")
	f.DurationVar(&ttl, "ttl", 0, "how long the job may wait and run, rounded up to whole seconds; 0 means the queue's")
	f.StringVar(&notBefore, "not-before", "", "run no earlier than this: a duration from now (90s, 2h) or an RFC 3339 time")
	f.StringVar(&key, "key", "", "idempotency key: a submit repeated with the same key returns the first job's id")
	f.BoolVar(&command, "command", false, "the arguments after QUEUE are a program and its arguments to run")
	return cmd
}

// submitPayload builds a submit's payload from the arguments after QUEUE.
func submitPayload(stdin io.Reader, rest []string, command bool) ([]byte, error) {
	if command {
		if len(rest) == 0 {
			return nil, usageErrorf("--command needs a program to run after QUEUE")
		}
		return commandPayload(rest), nil
	}
	switch {
	case len(rest) == 0:
		return nil, nil
	case len(rest) > 1:
		return nil, usageErrorf("one PAYLOAD argument at most, got %d (quote it, or use --command PROG ARG...)", len(rest))
	case rest[0] == "-":
		b, err := io.ReadAll(stdin)
		if err != nil {
			return nil, fmt.Errorf("reading the payload from standard input: %w", err)
		}
		return b, nil
	}
	return []byte(rest[0]), nil
}

// commandPayload is {"command": [...]}, the payload surge worker runs. HTML
// characters stay as they are: the payload is shown to people in status.
func commandPayload(argv []string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(struct {
		Command []string `json:"command"`
	}{argv}) // cannot fail: strings only
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// ttlSeconds converts a duration flag to the API's whole seconds, rounding
// up so that a TTL given never becomes "none".
func ttlSeconds(flag string, d time.Duration) (int32, error) {
	if d < 0 {
		return 0, usageErrorf("%s %v: must not be negative", flag, d)
	}
	s := math.Ceil(d.Seconds())
	if s > math.MaxInt32 {
		return 0, usageErrorf("%s %v: longer than the API's %d seconds", flag, d, math.MaxInt32)
	}
	return int32(s), nil
}

// parseNotBefore reads a duration from now or an RFC 3339 time.
func parseNotBefore(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, usageErrorf("--not-before %s: a duration from now must not be negative", s)
		}
		return now.Add(d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, usageErrorf("--not-before %q: want a duration from now such as 90s or 2h, or an RFC 3339 time such as 2025-06-01T12:00:00Z", s)
	}
	return t, nil
}

func ctlJobListCmd(o *ctlOptions) *cobra.Command {
	var (
		status, pageToken string
		limit             int32
	)
	cmd := leaf("list QUEUE", "List a queue's jobs, a page at a time", 1, func(cmd *cobra.Command, args []string) error {
		req := &jqpb.ListJobsRequest{QueueName: args[0], Limit: limit, PageToken: pageToken}
		if status != "" {
			st, err := parseJobStatus(status)
			if err != nil {
				return err
			}
			req.Status = st
		}
		return ctlRun(cmd, o, func(ctx context.Context, c ctlClients) (*jqpb.ListJobsResponse, error) {
			return msg(c.jobs.ListJobs(ctx, connect.NewRequest(req)))
		}, printJobList)
	})
	f := cmd.Flags()
	f.StringVar(&status, "status", "", "only jobs in this state: pending, assigned, running, done, failed or dead_lettered")
	f.Int32Var(&limit, "limit", 0, "jobs per page, at most 100; 0 means the server's default (20)")
	f.StringVar(&pageToken, "page-token", "", "the next page token a previous list printed")
	return cmd
}

// parseJobStatus accepts the enum's names in any case, with - for _.
func parseJobStatus(s string) (jqpb.JobStatus, error) {
	name := strings.ToUpper(strings.ReplaceAll(s, "-", "_"))
	if v, ok := jqpb.JobStatus_value[name]; ok && v != 0 {
		return jqpb.JobStatus(v), nil
	}
	return 0, usageErrorf("--status %q: want pending, assigned, running, done, failed or dead_lettered", s)
}

func ctlQueueCmd(o *ctlOptions) *cobra.Command {
	queue := groupCmd("queue", "Create, delete, inspect, list, pause and resume queues")
	var (
		maxRetries int32
		ttl        time.Duration
		force      bool
	)
	create := leaf("create NAME", "Create a queue", 1, func(cmd *cobra.Command, args []string) error {
		secs, err := ttlSeconds("--ttl", ttl)
		if err != nil {
			return err
		}
		return ctlRun(cmd, o, func(ctx context.Context, c ctlClients) (*jqpb.CreateQueueResponse, error) {
			return msg(c.admin.CreateQueue(ctx, connect.NewRequest(&jqpb.CreateQueueRequest{Name: args[0], MaxRetries: maxRetries, TtlSeconds: secs})))
		}, func(w io.Writer, r *jqpb.CreateQueueResponse) error {
			return printQueues(w, []*jqpb.Queue{r.GetQueue()})
		})
	})
	create.Flags().Int32Var(&maxRetries, "max-retries", 0, "retries after a failure for its jobs; 0 means the default (3)")
	create.Flags().DurationVar(&ttl, "ttl", 0, "how long its jobs may wait and run, rounded up to whole seconds; 0 means none")
	del := leaf("delete NAME", "Delete a queue (refused if it holds jobs, unless --force)", 1, func(cmd *cobra.Command, args []string) error {
		return ctlRun(cmd, o, func(ctx context.Context, c ctlClients) (*jqpb.DeleteQueueResponse, error) {
			return msg(c.admin.DeleteQueue(ctx, connect.NewRequest(&jqpb.DeleteQueueRequest{Name: args[0], Force: force})))
		}, func(w io.Writer, _ *jqpb.DeleteQueueResponse) error {
			_, err := fmt.Fprintf(w, "deleted queue %s\n", args[0])
			return err
		})
	})
	del.Flags().BoolVar(&force, "force", false, "delete the queue and its jobs even if it is not empty")
	queue.AddCommand(create, del, ctlQueueLatencyCmd(o),
		leaf("stats NAME", "Show a queue's job counts, duration and error rate", 1, func(cmd *cobra.Command, args []string) error {
			return ctlRun(cmd, o, func(ctx context.Context, c ctlClients) (*jqpb.GetQueueStatsResponse, error) {
				return msg(c.admin.GetQueueStats(ctx, connect.NewRequest(&jqpb.GetQueueStatsRequest{Name: args[0]})))
			}, func(w io.Writer, r *jqpb.GetQueueStatsResponse) error { return printQueueStats(w, r.GetStats()) })
		}),
		leaf("list", "List the queues", 0, func(cmd *cobra.Command, _ []string) error {
			return ctlRun(cmd, o, func(ctx context.Context, c ctlClients) (*jqpb.ListQueuesResponse, error) {
				return msg(c.admin.ListQueues(ctx, connect.NewRequest(&jqpb.ListQueuesRequest{})))
			}, func(w io.Writer, r *jqpb.ListQueuesResponse) error { return printQueues(w, r.GetQueues()) })
		}),
		leaf("pause NAME", "Stop dispatching a queue's jobs (submits still accepted)", 1, func(cmd *cobra.Command, args []string) error {
			return ctlRun(cmd, o, func(ctx context.Context, c ctlClients) (*jqpb.PauseQueueResponse, error) {
				return msg(c.admin.PauseQueue(ctx, connect.NewRequest(&jqpb.PauseQueueRequest{Name: args[0]})))
			}, func(w io.Writer, r *jqpb.PauseQueueResponse) error {
				return printQueues(w, []*jqpb.Queue{r.GetQueue()})
			})
		}),
		leaf("resume NAME", "Dispatch a paused queue's jobs again", 1, func(cmd *cobra.Command, args []string) error {
			return ctlRun(cmd, o, func(ctx context.Context, c ctlClients) (*jqpb.ResumeQueueResponse, error) {
				return msg(c.admin.ResumeQueue(ctx, connect.NewRequest(&jqpb.ResumeQueueRequest{Name: args[0]})))
			}, func(w io.Writer, r *jqpb.ResumeQueueResponse) error {
				return printQueues(w, []*jqpb.Queue{r.GetQueue()})
			})
		}),
	)
	return queue
}

func ctlWorkerCmd(o *ctlOptions) *cobra.Command {
	worker := groupCmd("worker", "List, drain and shut down workers")
	worker.AddCommand(
		leaf("list", "List the workers", 0, func(cmd *cobra.Command, _ []string) error {
			return ctlRun(cmd, o, func(ctx context.Context, c ctlClients) (*jqpb.ListWorkersResponse, error) {
				return msg(c.admin.ListWorkers(ctx, connect.NewRequest(&jqpb.ListWorkersRequest{})))
			}, func(w io.Writer, r *jqpb.ListWorkersResponse) error { return printWorkers(w, r.GetWorkers()) })
		}),
		leaf("drain ID", "Let a worker finish its running jobs, take no more, and exit", 1, func(cmd *cobra.Command, args []string) error {
			return ctlRun(cmd, o, func(ctx context.Context, c ctlClients) (*jqpb.DrainWorkerResponse, error) {
				return msg(c.admin.DrainWorker(ctx, connect.NewRequest(&jqpb.DrainWorkerRequest{WorkerId: args[0]})))
			}, func(w io.Writer, _ *jqpb.DrainWorkerResponse) error {
				_, err := fmt.Fprintf(w, "draining worker %s\n", args[0])
				return err
			})
		}),
		leaf("shutdown ID", "Stop a worker now; its jobs go back to their queues", 1, func(cmd *cobra.Command, args []string) error {
			return ctlRun(cmd, o, func(ctx context.Context, c ctlClients) (*jqpb.ShutdownWorkerResponse, error) {
				return msg(c.admin.ShutdownWorker(ctx, connect.NewRequest(&jqpb.ShutdownWorkerRequest{WorkerId: args[0]})))
			}, func(w io.Writer, _ *jqpb.ShutdownWorkerResponse) error {
				_, err := fmt.Fprintf(w, "shutting down worker %s\n", args[0])
				return err
			})
		}),
	)
	return worker
}

// exitStatus is the process's exit status for an error Execute returned.
func exitStatus(err error) int {
	var ue usageError
	if errors.As(err, &ue) {
		return 2
	}
	return 1
}

// errorPrefix names the command in an error message: "surge ctl" for
// ctl's commands, whose messages are the server's, "surge" otherwise.
func errorPrefix(cmd *cobra.Command) string {
	for c := cmd; c != nil && c.HasParent(); c = c.Parent() {
		if c.Name() == "ctl" && !c.Parent().HasParent() {
			return "surge ctl"
		}
	}
	return "surge"
}
