package main

import (
	"context"
	"fmt"
	"maps"
	"math"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/kafkalog"
	"github.com/surge-run/surge/internal/module"
	"github.com/surge-run/surge/internal/server"
)

// envVars ties flags to their SURGE_* variables, NATS-style: the flag
// wins, then SURGE_*, then the default. A variable is read exactly as its
// flag would be, so a value the flag refuses stops the start (unless the
// flag is given) instead of being ignored.
type envVars struct {
	vars map[string]string // flag name → variable
	bad  map[string]error  // flag name → why its variable was refused
}

func newEnvVars() *envVars { return &envVars{vars: map[string]string{}, bad: map[string]error{}} }

// envOr is a string flag's default from its variable: every string is a
// value, so there is nothing to refuse.
func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

// help binds flag to variable and returns the flag's help text naming it.
func (e *envVars) help(flag, variable, text string) string {
	e.vars[flag] = variable
	return text + " (" + variable + ")"
}

// read sets every flag of cmd whose variable is set from it, before the
// command line is parsed, and shows the value as the flag's default in
// --help. A value the flag refuses is kept for check.
func (e *envVars) read(cmd *cobra.Command) {
	for flag, variable := range e.vars {
		v, ok := os.LookupEnv(variable)
		if !ok {
			continue
		}
		fl := cmd.Flags().Lookup(flag)
		if err := fl.Value.Set(v); err != nil {
			e.bad[flag] = fmt.Errorf("invalid value %q in %s, the variable of --%s: %v", v, variable, flag, err)
			continue
		}
		fl.DefValue = fl.Value.String()
	}
}

// check returns the first refused variable whose flag the command line
// does not give (a flag given wins, so its variable is not read), as a
// usage error like the flag's own.
func (e *envVars) check(cmd *cobra.Command) error {
	for _, flag := range slices.Sorted(maps.Keys(e.bad)) {
		if !cmd.Flags().Changed(flag) {
			return usageError{e.bad[flag]}
		}
	}
	return nil
}

// flagSet is what a module's flags are defined on (cobra's flag set).
type flagSet interface {
	DurationVar(p *time.Duration, name string, value time.Duration, usage string)
	IntVar(p *int, name string, value int, usage string)
}

// moduleFlags defines the modules' flags on f and returns what reads
// their values once the command line is parsed.
func moduleFlags(f flagSet, env *envVars, mods []module.Module) (settings func() module.Settings) {
	values := map[string]func() any{}
	for _, m := range mods {
		for _, fl := range m.Flags {
			switch def := fl.Default.(type) {
			case time.Duration:
				p := new(time.Duration)
				f.DurationVar(p, fl.Name, def, env.help(fl.Name, fl.Env, fl.Usage))
				values[fl.Name] = func() any { return *p }
			case int:
				p := new(int)
				f.IntVar(p, fl.Name, def, env.help(fl.Name, fl.Env, fl.Usage))
				values[fl.Name] = func() any { return *p }
			default:
				panic(fmt.Sprintf("module %s: flag --%s has a default of type %T", m.Name, fl.Name, def))
			}
		}
	}
	return func() module.Settings {
		s := module.Settings{}
		for name, v := range values {
			s[name] = v()
		}
		return s
	}
}

// parseBytes reads a size such as 256MiB, 1GiB, 300MB or 268435456; "off"
// is -1 (no limit).
func parseBytes(s string) (int64, error) {
	if strings.EqualFold(s, "off") {
		return -1, nil
	}
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}}
	num, mult := s, int64(1)
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			num, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("%q is not a size such as 256MiB, 1GiB, 300MB or a number of bytes (or \"off\")", s)
	}
	return n * mult, nil
}

// defaultSnapshotBytes is engine.DefaultSnapshotBytes as --snapshot-bytes
// shows it.
var defaultSnapshotBytes = fmt.Sprintf("%dMiB", engine.DefaultSnapshotBytes>>20)

// serveLong is what `surge serve --help` says.
const serveLong = `Runs the Surge server: one listener for HTTP/1.1 and HTTP/2 (cleartext, or
TLS with --tls-cert), gRPC on the same port, the APIs of every workload
(ticketing, commerce, jobs, sequencer), /healthz and /metrics (also as
/actuator/health and /actuator/prometheus). On an address other machines can
reach it needs TLS and --tokens (docs/SECURITY.md) unless --insecure. Every
flag can also be set by the environment variable named in its help.
SIGTERM or SIGINT shuts down gracefully: in-flight requests finish, the log
is synced, a snapshot of every partition is written, and the process exits 0.

Resources: --max-events, --max-areas and --max-seats bound what the server
holds (seats nobody has reserved cost almost nothing, but every area can be
touched); past them event creation is refused with 409 and a message naming
the flag. --memory-limit is a soft limit for the Go runtime (GOGC stays 400,
so small states are collected rarely; the limit makes the GC work harder as
the heap nears it instead of growing the process).`

func newServeCmd() *cobra.Command {
	s := &serveFlags{env: newEnvVars()}
	cmd := &cobra.Command{
		Use:          "serve",
		Short:        "Run the Surge server (embedded log in --data-dir)",
		Long:         serveLong,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Before config copies the configuration: it fills the
			// token table in.
			if err := s.auth.resolve(); err != nil {
				return err
			}
			cfg, err := s.config(cmd)
			if err != nil {
				return err
			}
			if err := clusterSecrets(&cfg.Cluster); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			return server.Run(ctx, cfg)
		},
	}
	s.storageFlags(cmd)
	s.connectionFlags(cmd)
	s.admissionFlags(cmd)
	s.clusterFlags(cmd)
	clusterSecurityFlags(cmd.Flags(), s.env, &s.cfg.Cluster)
	serveTLSFlags(cmd.Flags(), s.env, &s.cfg.TLS)
	s.auth = addAuthFlags(cmd.Flags(), s.env, &s.cfg.Auth)
	s.settings = moduleFlags(cmd.Flags(), s.env, server.Builtin())
	s.obs = addObsFlags(cmd.Flags(), s.env, &s.cfg)
	s.env.read(cmd)
	return cmd
}

// serveFlags holds what `surge serve`'s flags set: server.Config's
// fields, the sizes parseBytes reads into it, and the modules' settings.
type serveFlags struct {
	cfg                                           server.Config
	memLimit, streamBuffer, bodyMemory, snapBytes string
	http1Lean                                     bool
	http2Lean                                     bool
	settings                                      func() module.Settings
	env                                           *envVars
	auth                                          *authFlags
	obs                                           *obsFlags
}

// config is the server's configuration once the command line is parsed:
// a refused SURGE_* variable or size stops the start.
func (s *serveFlags) config(cmd *cobra.Command) (cfg server.Config, err error) {
	if err := s.env.check(cmd); err != nil {
		return cfg, err
	}
	cfg = s.cfg
	cfg.HTTP1Standard = !s.http1Lean
	cfg.HTTP2Standard = !s.http2Lean
	cfg.Settings = s.settings()
	if cfg.MemoryLimit, err = parseBytes(s.memLimit); err != nil {
		return cfg, fmt.Errorf("--memory-limit (SURGE_MEMORY_LIMIT): %w", err)
	}
	if cfg.StreamBuffer, err = parseBytes(s.streamBuffer); err != nil || cfg.StreamBuffer < 0 {
		return cfg, fmt.Errorf("--stream-buffer (SURGE_STREAM_BUFFER): %q is not a size such as 256MiB", s.streamBuffer)
	}
	if cfg.MaxBodyMemory, err = parseBytes(s.bodyMemory); err != nil || cfg.MaxBodyMemory < 0 {
		return cfg, fmt.Errorf("--max-body-memory (SURGE_MAX_BODY_MEMORY): %q is not a size such as 256MiB", s.bodyMemory)
	}
	if err := snapshotTriggers(&cfg, s.snapBytes); err != nil {
		return cfg, err
	}
	return cfg, s.obs.apply(&cfg)
}

// storageFlags: where the log and snapshots go, how often they are
// written, and the process's memory.
func (s *serveFlags) storageFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&s.cfg.DataDir, "data-dir", "surge-data", s.env.help("data-dir", "SURGE_DATA_DIR", "directory for the log and snapshots"))
	f.IntVar(&s.cfg.Partitions, "partitions", 0, s.env.help("partitions", "SURGE_PARTITIONS", "number of partitions; 0 means the data directory's (or with --kafka the cluster's) count, or 8 for a new one"))
	f.IntVar(&s.cfg.SnapshotEvery, "snapshot-every", 0, s.env.help("snapshot-every", "SURGE_SNAPSHOT_EVERY", "commands a partition applies between snapshots; 0 means 100000. A partition whose last snapshot is more than twice the log it wrote since waits until that log is half the snapshot"))
	f.StringVar(&s.snapBytes, "snapshot-bytes", defaultSnapshotBytes, s.env.help("snapshot-bytes", "SURGE_SNAPSHOT_BYTES", "the log a restart after a crash replays at most, over all partitions: once the partitions have logged this much since their last snapshots (records replayed at startup included), each that logged at least its share of that (the total divided by the partition count) takes one; e.g. 16MiB, or off (or 0) to turn this trigger off"))
	f.DurationVar(&s.cfg.SnapshotInterval, "snapshot-interval", engine.DefaultSnapshotInterval, s.env.help("snapshot-interval", "SURGE_SNAPSHOT_INTERVAL", "a partition that logged anything since its last snapshot takes one at most this long after it, even if it has gone quiet; 0 turns this trigger off"))
	f.DurationVar(&s.cfg.SyncInterval, "sync-interval", time.Millisecond, s.env.help("sync-interval", "SURGE_SYNC_INTERVAL", "how long after a group commit (fsync) starts the next may wait, so that appends arriving meanwhile share it; it starts sooner once as many records (commands) wait as the largest of the last 16 commits carried"))
	f.StringVar(&s.memLimit, "memory-limit", "256MiB", s.env.help("memory-limit", "SURGE_MEMORY_LIMIT", "soft limit of the Go runtime's memory, e.g. 256MiB or 1GiB, or off: the GC runs more often as the heap nears it. A floor: when the process needs more (live heap plus half of it, at least 64MiB, plus stacks), the limit follows, so the GC never thrashes. GOMEMLIMIT, if set, is fixed and wins"))
}

// connectionFlags: the listener, its connections, and how long a
// graceful shutdown waits for their requests.
func (s *serveFlags) connectionFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&s.cfg.Addr, "addr", "127.0.0.1:8080", s.env.help("addr", "SURGE_ADDR", "listen address HOST:PORT; beyond loopback the server needs TLS and tokens (and in a cluster its secret) unless --insecure"))
	f.StringVar(&s.cfg.GRPCAddr, "grpc-addr", "", s.env.help("grpc-addr", "SURGE_GRPC_ADDR", "also serve the jobs gRPC services (jq's JobService, WorkerService, AdminService, with health and reflection) with grpc-go on this HOST:PORT, e.g. 127.0.0.1:50051 as jq's server does; same TLS, tokens and limits as --addr, at well under half the server CPU per unary call. Empty: gRPC on --addr only"))
	f.IntVar(&s.cfg.GRPCMaxStreams, "grpc-max-streams", server.DefaultGRPCMaxStreams, s.env.help("grpc-max-streams", "SURGE_GRPC_MAX_STREAMS", "concurrent streams per connection on --grpc-addr; gRPC clients queue their calls on the one connection they hold rather than open another, so this is each client's concurrency"))
	f.BoolVar(&s.cfg.Insecure, "insecure", false, s.env.help("insecure", "SURGE_INSECURE", "serve an --addr reachable from other machines without TLS, tokens or the cluster secret (logged as a warning at start); without it such a server refuses to start"))
	f.IntVar(&s.cfg.MaxConns, "max-conns", 0, s.env.help("max-conns", "SURGE_MAX_CONNS", "cap on open client connections; at the cap the longest-idle one is closed for a new one, or the new one gets 503 if all are busy. 0 means the open-file limit minus max(64, 10%) kept for the log and snapshots; more than that is refused"))
	f.DurationVar(&s.cfg.IdleTimeout, "idle-timeout", 30*time.Second, s.env.help("idle-timeout", "SURGE_IDLE_TIMEOUT", "close a keep-alive connection with no request in flight, or a new one that has sent nothing, after this long"))
	f.IntVar(&s.cfg.MaxStreams, "max-streams", 128, s.env.help("max-streams", "SURGE_MAX_STREAMS", "concurrent HTTP/2 streams per connection; a client sends more over more connections"))
	f.BoolVar(&s.cfg.Pprof, "pprof", false, "serve /debug/pprof/ for profiling (SURGE_PPROF=1)")
	s.env.vars["pprof"] = "SURGE_PPROF"
	f.IntVar(&s.cfg.PprofMutexFraction, "pprof-mutex-fraction", 0, s.env.help("pprof-mutex-fraction", "SURGE_PPROF_MUTEX_FRACTION", "with --pprof: sample 1 in N contended locks for /debug/pprof/mutex (e.g. 100; 0: off). Costs a little on each contended lock while on"))
	f.DurationVar(&s.cfg.PprofBlockRate, "pprof-block-rate", 0, s.env.help("pprof-block-rate", "SURGE_PPROF_BLOCK_RATE", "with --pprof: sample one event per this much time goroutines spend blocked (channels, selects, locks) for /debug/pprof/block (e.g. 10us; 0: off). Costs a little on each blocking event while on"))
	f.BoolVar(&s.cfg.UI, "ui", true, s.env.help("ui", "SURGE_UI", "serve the operator's web console at /ui/ (docs/CONSOLE.md); --ui=false turns it off"))
	f.BoolVar(&s.http1Lean, "http1-lean", true, s.env.help("http1-lean", "SURGE_HTTP1_LEAN", "serve cleartext HTTP/1.1 requests to the plain ticketing routes with Surge's own connection loop (same handlers and limits, less CPU per request; anything else goes to net/http); --http1-lean=false serves every request through net/http"))
	f.BoolVar(&s.http2Lean, "http2-lean", true, s.env.help("http2-lean", "SURGE_HTTP2_LEAN", "serve HTTP/2 connections (h2c, and h2 over TLS) with Surge's own HTTP/2 server (every route, same handlers and limits; a request waiting for an in-flight slot holds no goroutine); needs --http1-lean; --http2-lean=false serves them through net/http"))
	f.DurationVar(&s.cfg.ShutdownTimeout, "shutdown-timeout", 30*time.Second, "how long graceful shutdown waits for in-flight requests")
}

// admissionFlags: how much work the server takes on at once, and how it
// refuses the rest.
func (s *serveFlags) admissionFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.IntVar(&s.cfg.MaxInflight, "max-inflight", 4096, s.env.help("max-inflight", "SURGE_MAX_INFLIGHT", "requests handled at once over all connections; beyond it a request waits in the waiting room for a slot, first come first served (/healthz, /v1/health_check, /metrics, /debug/pprof/ exempt)"))
	f.DurationVar(&s.cfg.MaxWait, "max-wait", api.DefaultMaxWait, s.env.help("max-wait", "SURGE_MAX_WAIT", "the waiting room's patience: a request past --max-inflight whose predicted wait for a slot is longer gets 503 at once with Retry-After = that wait; below common clients' 30s per call, leaving 10s for the answer"))
	f.IntVar(&s.cfg.WaitingRoom, "waiting-room", api.DefaultWaitingRoom, s.env.help("waiting-room", "SURGE_WAITING_ROOM", "requests waiting at once for an in-flight slot (each holds its stream and handler goroutine, about 5KiB); beyond it 503 with Retry-After = the time the room takes to drain"))
	f.StringVar(&s.bodyMemory, "max-body-memory", "256MiB", s.env.help("max-body-memory", "SURGE_MAX_BODY_MEMORY", "bytes of large request bodies (over 64KiB) held at once over all requests; a body that does not fit waits, before it is read, until others are answered (up to 30s, then 503 / UNAVAILABLE)"))
	f.DurationVar(&s.cfg.MaxQueueDelay, "max-queue-delay", 0, s.env.help("max-queue-delay", "SURGE_MAX_QUEUE_DELAY", "longest a command may wait in its partition's queue: past half of it new ones get 429 at once (Retry-After = the predicted wait), past it a queued one is refused unapplied; 0 means --max-wait, so a burst served within the clients' patience is never refused; negative turns it off"))
	f.DurationVar(&s.cfg.StallTimeout, "stall-timeout", api.DefaultStallTimeout, s.env.help("stall-timeout", "SURGE_STALL_TIMEOUT", "a write to a stream's or long poll's reader (SSE, gRPC Read, StreamJobs, ?wait=, waitMs), or an HTTP/2 answer waiting for its client's window, blocked this long ends it: the reader stopped reading"))
	f.StringVar(&s.streamBuffer, "stream-buffer", "256MiB", s.env.help("stream-buffer", "SURGE_STREAM_BUFFER", "bytes of stream and long-poll pages (each at most 1MiB of messages) rendered and not yet written, over all readers; a page that cannot have its bytes within --stall-timeout ends its stream with reason server_busy"))
	f.IntVar(&s.cfg.MaxWaiters, "max-waiters", 10000, s.env.help("max-waiters", "SURGE_MAX_WAITERS", "long polls (?wait=, waitMs) and streams woken by notes, open at once; beyond it a long poll still waits its time, looking again every second, and a stream gets 503 / RESOURCE_EXHAUSTED with its own turn as Retry-After"))
}

// clusterFlags: running as a node of a cluster on Kafka.
func (s *serveFlags) clusterFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&s.cfg.Cluster.Kafka, "kafka", "", s.env.help("kafka", "SURGE_KAFKA", "run as a node of a cluster on Apache Kafka at these bootstrap brokers, HOST:PORT[,HOST:PORT...], instead of on --data-dir (see docs/CLUSTER.md)"))
	f.StringVar(&s.cfg.Cluster.Cluster, "cluster", "", s.env.help("cluster", "SURGE_CLUSTER", "with --kafka: the cluster's name; its topics are surge.NAME.log and surge.NAME.snapshots and its group surge.NAME"))
	f.StringVar(&s.cfg.Cluster.NodeID, "node-id", "", s.env.help("node-id", "SURGE_NODE_ID", "with --kafka: this node's name, unique in the cluster; default HOSTNAME-PORT"))
	f.StringVar(&s.cfg.Cluster.Advertise, "advertise", "", s.env.help("advertise", "SURGE_ADVERTISE", "with --kafka: HOST:PORT where the other nodes reach this one; default --addr (127.0.0.1 if it has no host)"))
	f.IntVar(&s.cfg.Cluster.Replication, "kafka-replication", 1, s.env.help("kafka-replication", "SURGE_KAFKA_REPLICATION", "with --kafka: replication factor of the topics the cluster creates; use 3 in production"))
	f.DurationVar(&s.cfg.Cluster.SessionTimeout, "kafka-session-timeout", 6*time.Second, s.env.help("kafka-session-timeout", "SURGE_KAFKA_SESSION_TIMEOUT", "with --kafka: how long a silent node keeps its partitions before the others take them over"))
	f.DurationVar(&s.cfg.Cluster.LogRetention, "kafka-log-retention", 168*time.Hour, s.env.help("kafka-log-retention", "SURGE_KAFKA_LOG_RETENTION", "with --kafka: how long the log topic keeps records when the cluster creates it; every partition must take a snapshot more often"))
	f.DurationVar(&s.cfg.Cluster.MinCycle, "kafka-min-cycle", kafkalog.DefaultMinCycle, s.env.help("kafka-min-cycle", "SURGE_KAFKA_MIN_CYCLE", "with --kafka: how long after a partition's Kafka transaction starts the next may wait, so that appends arriving meanwhile share it (each transaction costs the broker CPU whatever it holds); it starts sooner once as many records (commands) wait as the largest of the last 16 carried; negative for none"))
}

// snapshotTriggers puts --snapshot-bytes and --snapshot-interval into cfg.
// 0 on the command line is "off"; in server.Config it is "the default".
func snapshotTriggers(cfg *server.Config, snapBytes string) error {
	n, err := parseBytes(snapBytes)
	if err != nil {
		return fmt.Errorf("--snapshot-bytes (SURGE_SNAPSHOT_BYTES): %w", err)
	}
	if cfg.SnapshotInterval < 0 {
		return fmt.Errorf("--snapshot-interval %v (SURGE_SNAPSHOT_INTERVAL): must be a duration such as 1m, or 0 to turn the time trigger off", cfg.SnapshotInterval)
	}
	cfg.SnapshotBytes = offIfZero(n)
	cfg.SnapshotInterval = offIfZero(cfg.SnapshotInterval)
	return nil
}

// offIfZero maps a snapshot trigger's 0 on the command line ("off") to
// the engine's negative, its 0 being "the default".
func offIfZero[T int64 | time.Duration](v T) T {
	if v == 0 {
		return -1
	}
	return v
}
