package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/surge-run/surge/internal/bench"
)

// newBenchCmd is `surge bench`: load generators that reproduce each peer's
// published test against Surge.
func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Run load generators that reproduce peers' published tests",
	}
	cmd.AddCommand(benchTicketingCmd(), benchCommerceCmd(), benchOverloadCmd(), benchJobsCmd(), benchSequencerCmd(), benchRestartCmd(), benchNullServerCmd())
	return cmd
}

// benchTicketingLong is what `surge bench ticketing --help` says.
const benchTicketingLong = `Reproduces the flash-sale spike test of the Kafka Streams ticketing peer
(its published Go spike client): each group creates an event of --areas areas of
20 x 20 seats and launches --reservations reservations of 1..4 seats at once,
bounded by --inflight, over --clients HTTP clients. It checks every reserved
seat for double booking and reports completion time, rate, outcomes and
latency percentiles.

Unless --baseline=false it first runs the same spike against a server that
does nothing, to show the machine's HTTP ceiling. Unless --target is given it
starts ` + "`surge serve`" + ` itself on a fresh data dir per flow, measures its CPU
time over the spike, then kills it with SIGKILL and times its recovery, and
finally stops it with SIGTERM (it must exit 0) and times a restart after that.

With --cluster N it then runs the same spike against N fresh ` + "`surge serve --kafka`" + `
nodes on loopback (one new --cluster name per flow), each HTTP client sticking
to one node, round-robin, so most reservations are forwarded to the
partition's owner. The broker is --kafka-brokers ($SURGE_KAFKA_BROKERS) or one
the bench starts with scripts/kafka.sh. CPU per reservation counts every node
and the broker's java process (its share shown apart).

With --trace-cost it measures what tracing costs the server, in the same run:
for each flow, --trace-cost-rounds rounds (default 4), each running the spike
once against a fresh server per setting: tracing off, on at
--trace-cost-ratio (default 0.01) and on at 1, the order turned each round
(off, ratio, 1; then 1, ratio, off; then ratio, 1, off; ...) so no setting
always runs first. The traced servers get --otel, --trace-sample-ratio and
OTEL_EXPORTER_OTLP_ENDPOINT naming an OTLP/HTTP receiver the bench starts
on 127.0.0.1, which decodes and counts their spans; every server runs
without the caller's OTEL_* variables. It reports each setting's server CPU
per reservation (mean, median, sd, range over the rounds), its ratio to off
(of the means, and the median of each round's own ratio, which the goal
judges) and the spans received; spans while off, or none while on, fail
the run.

With --cores N1,N2,... it measures whether the server's efficiency holds
as cores are added, in the same run: for each flow and each count N in
turn, a fresh server pinned to the first N CPUs this bench may use (its
Go runtime's GOMAXPROCS follows), the bench itself pinned to the CPUs after
them for the spike (or, when none are left, sharing them, said in the
report). It reports each count's reservations per server CPU-second, its
percentage of the first count's (the goal: the last at least 80 %), and
how busy the bench's CPUs were (near 100 % the generator may be the
limit). Linux only. On 16 CPUs: --cores 2,4,8 leaves the bench 8 to 14.

--charts DIR also writes SVG charts of each flow over the spike (throughput,
latency p50/p99, server CPU per reservation, against the do-nothing server;
one point per --sample-interval) and report.md showing them; --html FILE
writes one self-contained page with the report and the charts inline.

With --crowd it runs the peer's own Go spike client instead, as a flash
crowd: --groups groups (default 5, the peer's processes) of --reservations
reservations each, every one in its own goroutine and all started at once,
over the compatibility flow (POST, then GET the decision); --clients h2c
clients per group open more connections whenever the server's stream limit
is reached (with --http2=false, the peer's HTTP/1.1 client instead:
retryablehttp's pooled Transport, a connection per request in flight). Each request is retried like hashicorp/go-retryablehttp with
RetryMax 20 (connection errors, 429 and 5xx; Retry-After honoured on 429
and 503, otherwise 1 s doubling up to 30 s) within 30 s per POST and 300 s
per GET. --areas defaults to the peer's ratio of seats to reservations (80
areas for 200,000). It reports errors by kind, completion time, requests
and refusals (with their Retry-After), seats sold, double bookings, the
server's CPU and peak resident memory, first against the do-nothing server
unless --baseline=false. --serve-flag passes flags to the started server.

With --crowd, --kill-after D and/or --kill-after-decisions N kill the started
server with SIGKILL D after the crowd's start or once N reservations have
their decision (GET answered RESERVED or FAILED), whichever comes first, and
start it again at once on the same data dir and address; the crowd keeps
going, its clients retrying the connection errors. Afterwards every id any
POST returned is read back from the restarted server: each must be RESERVED
with seats that fit its request, or FAILED (never 404), as the crowd's own
GET saw it if it did, and no seat may be held by two ids. Any failure makes
the exit status non-zero.`

func benchTicketingCmd() *cobra.Command {
	o := bench.TicketingOptions{}
	cmd := &cobra.Command{
		Use:          "ticketing",
		Short:        "Reproduce the ticketing peer's spike test (compat and native flows)",
		Long:         benchTicketingLong,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.ProgressTTY = benchIsTerminal(os.Stderr)
			if err := crowdDefaults(cmd, &o); err != nil {
				return err
			}
			if err := checkTraceCostFlags(cmd, &o); err != nil {
				return err
			}
			return runBench(cmd, &o.Exe, &o.Stdout, &o.Stderr, func(ctx context.Context) error { return bench.RunTicketing(ctx, o) })
		},
	}
	ticketingSpikeFlags(cmd, &o)
	ticketingServerFlags(cmd, &o)
	ticketingClusterFlags(cmd, &o)
	ticketingCrowdFlags(cmd, &o)
	ticketingTraceCostFlags(cmd, &o)
	return cmd
}

// ticketingSpikeFlags: the spike's shape and what is reported.
func ticketingSpikeFlags(cmd *cobra.Command, o *bench.TicketingOptions) {
	f := cmd.Flags()
	f.IntVarP(&o.Areas, "areas", "a", 10, "areas per event, each 20 x 20 seats")
	f.IntVarP(&o.Reservations, "reservations", "n", 20000, "reservations per group")
	f.IntVarP(&o.Clients, "clients", "c", 4, "HTTP clients per group, each with its own connections")
	f.IntVarP(&o.Groups, "groups", "g", 1, "generator groups, each with its own event, run concurrently (the peer ran 5 processes)")
	f.IntVar(&o.Inflight, "inflight", 256, "reservations in flight at once, across all groups")
	f.BoolVar(&o.HTTP2, "http2", true, "cleartext HTTP/2 with prior knowledge (h2c); false for HTTP/1.1 (with --crowd: the peer's pooled HTTP/1.1 client)")
	f.StringVar(&o.Flow, "flow", bench.FlowBoth, "compat (POST then GET), native (one round trip) or both")
	f.BoolVar(&o.Baseline, "baseline", true, "also run the spike against a server that does nothing")
	f.Uint64Var(&o.Seed, "seed", 1, "seed of the random area and seat-count choices")
	f.StringVar(&o.JSONPath, "json", "", "also write the report as JSON to this file")
	f.BoolVar(&o.ConsolePoll, "console-poll", false, "also run each flow's spike against a second fresh server while every page of the web console (/ui/) polls it once a second, and report the server's CPU per reservation with and without it")
	f.IntVar(&o.Rounds, "rounds", 1, "run the spike against a fresh server and a fresh do-nothing server this many times in all, the order turned each round, and judge the CPU goal on the median of the rounds' own ratios (the host's drift between rounds cancels out)")
	f.IntSliceVar(&o.Cores, "cores", nil, "also run each flow's spike on a fresh server pinned to each of these numbers of CPUs in turn (e.g. 2,4,8: the first 2, 4, then 8 CPUs the bench may use), the bench itself pinned to the CPUs after them, and report reservations per server CPU-second against the first count's (Linux)")
	chartFlags(f, &o.Options, "flow")
}

// chartFlags: --charts, --html and the timeline they draw, for a bench
// whose report charts each of its "per" (flow, level).
func chartFlags(f *pflag.FlagSet, o *bench.Options, per string) {
	f.StringVar(&o.ChartsDir, "charts", "", "also write SVG charts per "+per+" (throughput, latency p50/p99 and server CPU per operation over time, against the do-nothing server; CPU per operation of each run) and report.md showing them to this dir")
	f.StringVar(&o.HTMLPath, "html", "", "also write one self-contained HTML report (text report and charts inline) to this file")
	f.DurationVar(&o.SampleInterval, "sample-interval", time.Second, "length of one point of the timeline (JSON and charts): operations, latency percentiles, server CPU (at least 10ms)")
}

// ticketingServerFlags: the server under test, started or given.
func ticketingServerFlags(cmd *cobra.Command, o *bench.TicketingOptions) {
	f := cmd.Flags()
	f.StringVar(&o.Target, "target", "", "base URL of a running server to use instead of starting one (CPU from its /metrics; no restart)")
	f.IntVar(&o.Partitions, "partitions", 0, "--partitions for the started server (0: its default)")
	f.StringVar(&o.DataDir, "data-dir", "", "parent of the started servers' data dirs (default: a temp dir, removed after)")
	f.StringVar(&o.ServeExe, "serve-exe", "", "surge binary to start as the server (default: this one); compares another build under the same generator")
}

// ticketingClusterFlags: the same spike against a cluster on Kafka.
func ticketingClusterFlags(cmd *cobra.Command, o *bench.TicketingOptions) {
	f := cmd.Flags()
	f.IntVar(&o.Cluster, "cluster", 0, "also run each flow against a cluster of this many \"surge serve --kafka\" nodes on loopback (0: none); clients spread over the nodes round-robin")
	f.IntVar(&o.ClusterWarmup, "cluster-warmup", 2, "with --cluster: unmeasured spikes against throwaway clusters first, so the broker's JVM is warm as in service (0: none)")
	f.StringVar(&o.KafkaBrokers, "kafka-brokers", os.Getenv("SURGE_KAFKA_BROKERS"), "with --cluster: the Kafka broker to use (default $SURGE_KAFKA_BROKERS); empty: start one with scripts/kafka.sh and stop it at the end")
	f.IntVar(&o.KafkaPID, "kafka-pid", 0, "with --kafka-brokers: the broker's java process id, to count its CPU (otherwise it is reported as not measured)")
	f.StringVar(&o.KafkaScript, "kafka-script", "", "with --cluster and no broker: path of scripts/kafka.sh (default: found above the surge binary or the working directory)")
	f.BoolVar(&o.Pprof, "pprof", false, "the cluster's nodes serve /debug/pprof/ (for profiling during the spike)")
}

// ticketingCrowdFlags: the peer's own spike client, and a kill -9 in the
// middle of it.
func ticketingCrowdFlags(cmd *cobra.Command, o *bench.TicketingOptions) {
	f := cmd.Flags()
	f.BoolVar(&o.Crowd, "crowd", false, "run the peer's own spike client: every reservation at once, its retries and deadlines (see above)")
	f.StringVar(&o.CrowdTransport, "crowd-transport", bench.CrowdTransportXNet, "with --crowd: the clients' HTTP/2 transport, x/net (the peer's x/net/http2, one dial at a time when every connection is full) or net/http (its h2c Transport, which dials once per waiting request)")
	f.StringArrayVar(&o.ServeArgs, "serve-flag", nil, "a flag for the started server (not --cluster's nodes), e.g. --serve-flag=--max-inflight=100000 (repeatable); with --serve-flag=--tls-cert=FILE it is reached over https, trusting --ca-file")
	clientFlags(f, &o.Conn)
	f.DurationVar(&o.KillAfter, "kill-after", 0, "with --crowd: kill the started server with SIGKILL this long after the crowd's start, restart it, and read back every id handed out (0: not by time)")
	f.Int64Var(&o.KillAfterDecisions, "kill-after-decisions", 0, "with --crowd: kill the started server with SIGKILL once this many reservations have their decision, restart it, and read back every id handed out (0: not by count)")
}

// crowdDefaults gives --crowd the peer's shape where the flags were not
// set: its 5 processes and its ratio of seats to reservations.
func crowdDefaults(cmd *cobra.Command, o *bench.TicketingOptions) error {
	f := cmd.Flags()
	if !o.Crowd {
		if len(o.ServeArgs) > 0 && (o.Target != "" || o.Cluster > 0) {
			return fmt.Errorf("--serve-flag is for the one server the bench starts: it takes no --target or --cluster")
		}
		if f.Changed("crowd-transport") || f.Changed("kill-after") || f.Changed("kill-after-decisions") {
			return fmt.Errorf("--crowd-transport, --kill-after and --kill-after-decisions are for --crowd only")
		}
		return nil
	}
	if !o.HTTP2 && f.Changed("crowd-transport") {
		return fmt.Errorf("--crowd-transport picks the HTTP/2 client; with --http2=false the crowd uses the peer's HTTP/1.1 client")
	}
	if o.Cluster > 0 || f.Changed("flow") || f.Changed("inflight") {
		return fmt.Errorf("--crowd is the compat flow with every reservation at once, on one server: it takes no --cluster, --flow or --inflight")
	}
	if !f.Changed("groups") {
		o.Groups = bench.CrowdGroups
	}
	if !f.Changed("areas") {
		o.Areas = bench.CrowdAreas(o.Reservations)
	}
	return nil
}

func benchCommerceCmd() *cobra.Command {
	o := bench.CommerceOptions{}
	var levels []float64
	cmd := &cobra.Command{
		Use:   "commerce",
		Short: "Reproduce the commerce peer's k6 load test (order saga timed by polling and by long poll)",
		Long: `Reproduces the k6 test of the Hazelcast eCommerce peer
(its k6 load test): seeds 100 customers and 100 products, then runs
an open-loop constant arrival rate of the 60/25/15 mix for --duration at each
level: iterations are scheduled on a fixed clock whatever earlier ones are
doing, and latency counts from when each was due. 60 %: create an order of
one item (unitPrice "10.00", a string, as the peer sends); 6 % of all
iterations also time the order's saga to CONFIRMED or CANCELLED, alternately
by polling GET /api/orders/{id} every 200 ms like the peer and by the native
long poll (?wait=10s), each capped at 10 s. 25 %: reserve 1 unit for order
perftest-<uuid>. 15 %: create a customer.

Unless --baseline=false each level first runs the same mix against a server
that does nothing, for the goals' ratios. Unless --target is given it starts
` + "`surge serve`" + ` on a fresh data dir and reports its CPU per iteration and
peak resident memory. Products are seeded with quantityOnHand 100,000 like the
peer, or twice what the whole run could take from one product if that is more.`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Levels = levels
			o.ProgressTTY = benchIsTerminal(os.Stderr)
			return runBench(cmd, &o.Exe, &o.Stdout, &o.Stderr, func(ctx context.Context) error { return bench.RunCommerce(ctx, o) })
		},
	}
	f := cmd.Flags()
	f.Float64Var(&o.Rate, "rate", 1000, "iterations/s (when --levels is not given)")
	f.Float64SliceVar(&levels, "levels", nil, "iterations/s of each level, run in sequence (e.g. 100,500,1000,5000); replaces --rate")
	f.DurationVar(&o.Duration, "duration", 60*time.Second, "length of each level")
	f.IntVarP(&o.Clients, "clients", "c", 4, "HTTP clients, each with its own connections")
	f.IntVar(&o.MaxInflight, "max-inflight", 10000, "iterations in flight at once; one due beyond it is counted as not sent")
	f.BoolVar(&o.HTTP2, "http2", true, "cleartext HTTP/2 with prior knowledge (h2c); false for HTTP/1.1")
	f.BoolVar(&o.Baseline, "baseline", true, "also run each level against a server that does nothing")
	f.StringVar(&o.Target, "target", "", "base URL of a running server to use instead of starting one (CPU from its /metrics)")
	f.IntVar(&o.Partitions, "partitions", 0, "--partitions for the started server (0: its default)")
	f.StringVar(&o.DataDir, "data-dir", "", "parent of the started server's data dir (default: a temp dir, removed after)")
	f.StringVar(&o.ServeExe, "serve-exe", "", "surge binary to start as the server (default: this one)")
	f.StringVar(&o.JSONPath, "json", "", "also write the report as JSON to this file")
	f.Uint64Var(&o.Seed, "seed", 1, "seed of the mix, the customer and product choices and the prices")
	chartFlags(f, &o.Options, "level")
	clientFlags(f, &o.Conn)
	return cmd
}

func benchOverloadCmd() *cobra.Command {
	o := bench.OverloadOptions{}
	cmd := &cobra.Command{
		Use:   "overload",
		Short: "Offer a multiple of one partition's capacity and report what accepted requests waited",
		Long: `Creates events whose areas all live in one partition, so that partition is the
bottleneck, and sends native 1-seat reservations (POST /v2/reservations).
First a closed loop with --concurrency requests in flight measures the
partition's capacity (accepted answers per second: 201, or 409 once seats run
out). Then an open loop offers --multiple times that rate for --seconds:
requests are sent on a fixed schedule whether or not earlier ones were
answered, each with --client-timeout, at most --max-inflight waiting at once.
It reports the offered and accepted rates, the share of 429 (and whether each
had Retry-After), p50/p99/max latency of accepted requests measured from when
each was due, timeouts, server CPU and peak resident memory.

The generator shares the machine with the server: if it cannot send the rate
asked, the report says what it did offer.`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runBench(cmd, &o.Exe, &o.Stdout, &o.Stderr, func(ctx context.Context) error { return bench.RunOverload(ctx, o) })
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Target, "target", "", "base URL of a running server to use instead of starting one (CPU from its /metrics)")
	f.IntVar(&o.Partitions, "partitions", 0, "--partitions for the started server (0: its default)")
	f.StringVar(&o.MaxQueueDelay, "max-queue-delay", "", "--max-queue-delay for the started server (empty: its default)")
	f.StringVar(&o.DataDir, "data-dir", "", "parent of the started server's data dir (default: a temp dir, removed after)")
	f.IntVarP(&o.Areas, "areas", "a", 16, "areas of 1,000 x 100 seats per event, all in one partition")
	f.Float64Var(&o.Multiple, "multiple", 10, "offered rate as a multiple of the measured capacity")
	f.Float64Var(&o.Rate, "rate", 0, "offered requests/s; replaces --multiple x capacity when > 0")
	f.Float64Var(&o.CapacitySeconds, "capacity-seconds", 3, "length of the closed-loop capacity phase")
	f.Float64Var(&o.Seconds, "seconds", 10, "length of the open-loop overload phase")
	f.IntVar(&o.Concurrency, "concurrency", 512, "requests in flight in the capacity phase")
	f.IntVar(&o.MaxInflight, "max-inflight", 4096, "most requests waiting at once in the overload phase")
	f.IntVarP(&o.Clients, "clients", "c", 8, "HTTP clients, each with its own connections")
	f.BoolVar(&o.HTTP2, "http2", true, "cleartext HTTP/2 with prior knowledge (h2c); false for HTTP/1.1")
	f.DurationVar(&o.ClientTimeout, "client-timeout", 10*time.Second, "a request not answered by then counts as a timeout")
	clientFlags(f, &o.Conn)
	f.StringVar(&o.ServeExe, "serve-exe", "", "surge binary to start as the server (default: this one); compares another build under the same generator")
	f.StringVar(&o.JSONPath, "json", "", "also write the report as JSON to this file")
	return cmd
}

func benchJobsCmd() *cobra.Command {
	o := bench.JobsOptions{}
	cmd := &cobra.Command{
		Use:   "jobs",
		Short: "Reproduce the jobs peer's ghz submit test, and time jobs end to end over real worker streams",
		Long: `Two phases over gRPC (h2c), each run first against a do-nothing gRPC server
(the transport's ceiling) and then against ` + "`surge serve`" + ` (a fresh process and data
dir per phase), unless --baseline=false or --target is given.

submit: like the jobs peer's ghz run, --concurrency
callers each send SubmitJob (queue "default", payload {"command":["echo","bench"]})
in a closed loop over --connections HTTP/2 connections for --duration. It
reports the rate, latency percentiles, errors by code (RESOURCE_EXHAUSTED, a
full queue, apart), server CPU per submit and peak resident memory. Unless
--submit-workers=false, workers take and report the jobs meanwhile, so the
queue does not fill up.

e2e: --workers streams (RegisterWorker with --worker-concurrency, then
StreamJobs) report success for each job as soon as it arrives (AckJob first
with --ack); a generator submits --rate jobs/s in open loop (SubmitJobs of
--batch jobs if > 1) for --duration, then waits up to --drain for the rest.
It reports the true submit→start (submit call start to the job reaching a
worker) and submit→done (to ReportResult returning) percentiles, jobs executed
per second, server CPU per job and peak resident memory. Both phases also say
whether the host stalled the run: how often a goroutine of the bench sleeping
5 ms woke more than 20 ms late, and how many of the server's WAL fsyncs took
over 25.6 ms and over 102.4 ms (from its /metrics).

unary (only when asked for): the peer's measurement as ghz makes it, with a
grpc-go client: --concurrency callers over --connections connections make
--total SubmitJob calls, no workers. Against a do-nothing grpc-go server, a
do-nothing connect-go server (net/http), then a fresh surge serve on its
--grpc-addr (grpc-go) and its --addr (connect-go): rate, latency
percentiles, server CPU per submit, judged against the do-nothing grpc-go
server. With --rounds N, N-1 more rounds each run the do-nothing grpc-go
server and a fresh surge --grpc-addr again (Surge first in even rounds),
and the goals judge the median of the rounds' own comparisons.`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.ProgressTTY = benchIsTerminal(os.Stderr)
			return runBench(cmd, &o.Exe, &o.Stdout, &o.Stderr, func(ctx context.Context) error { return bench.RunJobs(ctx, o) })
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Phase, "phase", bench.JobsPhaseBoth, "submit, e2e, both, or unary (the ghz-like grpc-go run against both do-nothing servers and both of Surge's gRPC listeners)")
	f.IntVarP(&o.Total, "total", "n", 100000, "unary phase: SubmitJob calls in all (ghz --total); a queue holds at most 100,000 unfinished jobs")
	f.IntVar(&o.Rounds, "rounds", 1, "unary phase: rounds; after the first (every server), each runs the do-nothing grpc-go server and a fresh surge --grpc-addr again, the order turned each round, and the goals judge the median of the rounds' own figures (the host's drift between rounds cancels out)")
	f.DurationVar(&o.Duration, "duration", 10*time.Second, "length of each phase's load")
	f.IntVarP(&o.Concurrency, "concurrency", "c", 200, "submit phase: concurrent callers (ghz -c)")
	f.IntVar(&o.Connections, "connections", 1, "HTTP/2 connections the submit calls share (ghz --connections; its default is 1)")
	f.BoolVar(&o.SubmitWork, "submit-workers", true, "submit phase: run the workers too, so jobs do not pile up PENDING")
	f.Float64Var(&o.Rate, "rate", 10000, "e2e phase: jobs/s offered (with --rate-of-capacity, the capacity probe's first rate)")
	f.Float64Var(&o.RateOfCapacity, "rate-of-capacity", 0, "e2e phase: first find the highest rate fresh servers sustain (4 s steps from --rate up, 15 % apart, until one falls behind), then offer this fraction of it (e.g. 0.8, the goal's); 0: offer --rate")
	f.IntVar(&o.Batch, "batch", 1, "e2e phase: jobs per submit call; > 1 uses SubmitJobs")
	f.IntVar(&o.MaxInflight, "max-inflight", 1000, "e2e phase: submit calls in flight at once; one due beyond it is counted as not sent")
	f.IntVarP(&o.Workers, "workers", "w", 4, "worker streams")
	f.IntVar(&o.WorkerConc, "worker-concurrency", 64, "jobs each worker holds at once (RegisterWorker concurrency)")
	f.BoolVar(&o.GRPC, "grpc", false, "submit and e2e phases: speak grpc-go to each server's --grpc-addr (picked by the bench) instead of connect-go over h2c to its --addr")
	f.BoolVar(&o.Ack, "ack", false, "workers acknowledge each job (AckJob) before reporting it")
	f.DurationVar(&o.Drain, "drain", 10*time.Second, "e2e phase: how long to wait after the load for submitted jobs to be executed")
	f.BoolVar(&o.Baseline, "baseline", true, "also run each phase against a server that does nothing")
	f.StringVar(&o.Target, "target", "", "base URL (http://host:port) of a running server to use instead of starting one (CPU from its /metrics)")
	f.IntVar(&o.Partitions, "partitions", 0, "--partitions for the started server (0: its default)")
	f.StringVar(&o.DataDir, "data-dir", "", "parent of the started servers' data dirs (default: a temp dir, removed after)")
	f.StringVar(&o.ServeExe, "serve-exe", "", "surge binary to start as the server (default: this one); compares another build under the same generator")
	f.StringVar(&o.JSONPath, "json", "", "also write the report as JSON to this file")
	chartFlags(f, &o.Options, "phase")
	return cmd
}

func benchSequencerCmd() *cobra.Command {
	o := bench.SequencerOptions{}
	cmd := &cobra.Command{
		Use:   "sequencer",
		Short: "Reproduce the sequencer peer's run (60,000 messages in order), with delays and with many groups",
		Long: `Drives the benchmark routes of the Redis sequencer peer
(its benchmark scenario), as its admin script does but polling every
--poll instead of every second: POST /messages {name, numberOfMessages,
creationDelay, processingTime} makes the server create the messages and
process them on its in-process processors; GET /list/sequenced/count?name=
is polled until it equals the number sent; then /list/stats (per-stage
percentiles, isOrdered) and /list/perfs are read.

Scenarios (--scenario, comma-separated):
  peer    one group of --messages, creationDelay 0, processingTime 0: the
          peer's published run
  delays  one group with --processing-time and --creation-delay
  groups  --groups groups of --messages each, all POSTed at once, zero
          delays (or --groups-creation-delay to pace them); each group
          polled at most every 50 ms

Each scenario reports the total time (first POST to the poll that saw the
last count complete), msg/s, per-stage latency, the order check, server CPU
per message and peak resident memory. Unless --target is given, each runs
against a fresh ` + "`surge serve`" + ` on a fresh data dir. Against --target the
scenario's groups (bench-peer, bench-delays, bench-groups-NNN) are deleted
before and after.`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.ProgressTTY = benchIsTerminal(os.Stderr)
			return runBench(cmd, &o.Exe, &o.Stdout, &o.Stderr, func(ctx context.Context) error { return bench.RunSequencer(ctx, o) })
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Scenarios, "scenario", "peer,delays,groups", "scenarios to run, in order: peer, delays, groups")
	f.IntVarP(&o.Messages, "messages", "n", 60000, "messages per group (numberOfMessages)")
	f.IntVarP(&o.Groups, "groups", "g", 64, "groups scenario: groups created at once")
	f.IntVar(&o.ProcessingTime, "processing-time", 5, "delays scenario: processingTime, ms per message")
	f.IntVar(&o.CreationDelay, "creation-delay", 0, "delays scenario: creationDelay, ms between messages")
	f.IntVar(&o.GroupsDelay, "groups-creation-delay", 0, "groups scenario: creationDelay, ms between a group's messages, to pace it for the latency goal (at most groups x 1000 / delay msg/s)")
	f.DurationVar(&o.Poll, "poll", 10*time.Millisecond, "how often to poll /list/sequenced/count (the groups scenario: at most every 50 ms)")
	f.DurationVar(&o.Timeout, "timeout", 5*time.Minute, "give up on a scenario whose messages are not all sequenced by then")
	f.StringVar(&o.Target, "target", "", "base URL of a running server to use instead of starting one (CPU from its /metrics)")
	f.IntVar(&o.Partitions, "partitions", 0, "--partitions for the started server (0: its default)")
	f.StringVar(&o.DataDir, "data-dir", "", "parent of the started servers' data dirs (default: a temp dir, removed after)")
	f.StringVar(&o.ServeExe, "serve-exe", "", "surge binary to start as the server (default: this one); compares another build under the same generator")
	f.StringVar(&o.JSONPath, "json", "", "also write the report as JSON to this file")
	return cmd
}

func benchNullServerCmd() *cobra.Command {
	var addr, grpcAddr string
	cmd := &cobra.Command{
		Use:          "nullserver",
		Short:        "Serve the ticketing and commerce bench routes and the jobs gRPC services with handlers that do nothing (the benches' baseline)",
		Hidden:       true,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if grpcAddr != "" {
				go func() {
					if err := bench.ServeNullGRPC(ctx, grpcAddr); err != nil {
						fmt.Fprintln(os.Stderr, "nullserver: grpc-go:", err)
						stop()
					}
				}()
			}
			if err := bench.ServeNull(ctx, addr); err != nil {
				return fmt.Errorf("nullserver: %w", err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:8080", "address to listen on")
	cmd.Flags().StringVar(&grpcAddr, "grpc-addr", "", "also serve a do-nothing jq JobService and WorkerService with grpc-go on this address (the jobs bench's baseline over grpc-go)")
	return cmd
}

// benchIsTerminal says whether progress can redraw one line in place.
func benchIsTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func benchRestartCmd() *cobra.Command {
	o := bench.RestartOptions{}
	cmd := &cobra.Command{
		Use:   "restart",
		Short: "Time the restart after kill -9 of a server loaded with each workload",
		Long: `For each of --workloads, starts ` + "`surge serve`" + ` on a fresh data dir (with
--serve-flag's flags), loads it with that workload's generator (the
ticketing native spike, the commerce mix at --commerce-rate, jobs submitted
and run by workers, the sequencer peer scenario) for --load, kills it with
SIGKILL while the load runs, and starts it again on the same data dir. It
reports the log and snapshots on disk at the kill, the records the restart
replayed, the seconds from exec to the first /healthz 200 and to the first
command answered (POST /api/customers, 201), and the restart's CPU time and
peak resident memory.`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runBench(cmd, &o.Exe, &o.Stdout, &o.Stderr, func(ctx context.Context) error { return bench.RunRestart(ctx, o) })
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&o.Workloads, "workloads", bench.RestartWorkloads, "workloads to load the server with, one restart each")
	f.DurationVar(&o.Load, "load", 60*time.Second, "how long each workload loads the server before the kill -9")
	f.Float64Var(&o.CommerceRate, "commerce-rate", 1000, "iterations/s of the commerce load")
	f.StringArrayVar(&o.ServeArgs, "serve-flag", nil, "a flag for the started servers, e.g. --serve-flag=--snapshot-bytes=16MiB (repeatable)")
	f.StringVar(&o.DataDir, "data-dir", "", "parent of the servers' data dirs (default: a temp dir, removed after)")
	f.StringVar(&o.ServeExe, "serve-exe", "", "surge binary to start as the server (default: this one)")
	f.StringVar(&o.JSONPath, "json", "", "also write the results as JSON to this file")
	return cmd
}

// runBench is the end of every bench subcommand: it gives the bench this
// executable (to start `surge serve` with) and the command's output, then
// runs it until SIGINT or SIGTERM.
func runBench(cmd *cobra.Command, exe *string, stdout, stderr *io.Writer, run func(context.Context) error) error {
	var err error
	if *exe, err = os.Executable(); err != nil {
		return err
	}
	*stdout, *stderr = cmd.OutOrStdout(), cmd.ErrOrStderr()
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return run(ctx)
}
