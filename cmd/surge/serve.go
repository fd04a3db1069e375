package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/kafkalog"
	"github.com/surge-run/surge/internal/server"
	"github.com/surge-run/surge/internal/workload/commerce"
	"github.com/surge-run/surge/internal/workload/jobs"
	"github.com/surge-run/surge/internal/workload/sequencer"
	"github.com/surge-run/surge/internal/workload/ticketing"
)

// envOr lets every flag be set from the environment, NATS-style: the flag
// wins, then SURGE_*, then the default.
func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

func envIntOr(name string, def int) int {
	if v, ok := os.LookupEnv(name); ok {
		if n, err := strconv.Atoi(v); err == nil {
			return n
		}
		fmt.Fprintf(os.Stderr, "surge: ignoring %s=%q: not an integer\n", name, v)
	}
	return def
}

func envDurationOr(name string, def time.Duration) time.Duration {
	if v, ok := os.LookupEnv(name); ok {
		if d, err := time.ParseDuration(v); err == nil {
			return d
		}
		fmt.Fprintf(os.Stderr, "surge: ignoring %s=%q: not a duration such as 500us\n", name, v)
	}
	return def
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

func newServeCmd() *cobra.Command {
	var cfg server.Config
	var memLimit, streamBuffer, bodyMemory, snapBytes string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the Surge server (embedded log in --data-dir)",
		Long: `Runs the Surge server: one listener for HTTP/1.1 and cleartext HTTP/2,
the ticketing and commerce APIs, /healthz and /metrics (also as
/actuator/health and /actuator/prometheus). Every flag can also be set by the
environment variable named in its help. SIGTERM or SIGINT shuts down
gracefully: in-flight requests finish, the log is synced, a snapshot of every
partition is written, and the process exits 0.

Resources: --max-events, --max-areas and --max-seats bound what the server
holds (seats nobody has reserved cost almost nothing, but every area can be
touched); past them event creation is refused with 409 and a message naming
the flag. --memory-limit is a soft limit for the Go runtime (GOGC stays 400,
so small states are collected rarely; the limit makes the GC work harder as
the heap nears it instead of growing the process).`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			if cfg.MemoryLimit, err = parseBytes(memLimit); err != nil {
				return fmt.Errorf("--memory-limit (SURGE_MEMORY_LIMIT): %w", err)
			}
			if cfg.StreamBuffer, err = parseBytes(streamBuffer); err != nil || cfg.StreamBuffer < 0 {
				return fmt.Errorf("--stream-buffer (SURGE_STREAM_BUFFER): %q is not a size such as 256MiB", streamBuffer)
			}
			if cfg.MaxBodyMemory, err = parseBytes(bodyMemory); err != nil || cfg.MaxBodyMemory < 0 {
				return fmt.Errorf("--max-body-memory (SURGE_MAX_BODY_MEMORY): %q is not a size such as 256MiB", bodyMemory)
			}
			if err := snapshotTriggers(&cfg, snapBytes); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			return server.Run(ctx, cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Addr, "addr", envOr("SURGE_ADDR", "127.0.0.1:8080"), "listen address HOST:PORT (SURGE_ADDR)")
	f.StringVar(&cfg.DataDir, "data-dir", envOr("SURGE_DATA_DIR", "surge-data"), "directory for the log and snapshots (SURGE_DATA_DIR)")
	f.IntVar(&cfg.Partitions, "partitions", envIntOr("SURGE_PARTITIONS", 0), "number of partitions; 0 means the data directory's (or with --kafka the cluster's) count, or 8 for a new one (SURGE_PARTITIONS)")
	f.IntVar(&cfg.SnapshotEvery, "snapshot-every", envIntOr("SURGE_SNAPSHOT_EVERY", 0), "commands a partition applies between snapshots; 0 means 100000 (SURGE_SNAPSHOT_EVERY)")
	f.StringVar(&snapBytes, "snapshot-bytes", envOr("SURGE_SNAPSHOT_BYTES", defaultSnapshotBytes), "the log a restart after a crash replays at most, over all partitions: each partition takes a snapshot once it has logged its share (this divided by the partition count) since its last one, records replayed at startup included; e.g. 16MiB, or off (or 0) to turn this trigger off (SURGE_SNAPSHOT_BYTES)")
	f.DurationVar(&cfg.SnapshotInterval, "snapshot-interval", envDurationOr("SURGE_SNAPSHOT_INTERVAL", engine.DefaultSnapshotInterval), "a partition that logged anything since its last snapshot takes one at most this long after it, even if it has gone quiet; 0 turns this trigger off (SURGE_SNAPSHOT_INTERVAL)")
	f.DurationVar(&cfg.SyncInterval, "sync-interval", envDurationOr("SURGE_SYNC_INTERVAL", time.Millisecond), "least time between two group commits (fsyncs); appends arriving sooner share the next one (SURGE_SYNC_INTERVAL)")
	f.IntVar(&cfg.MaxConns, "max-conns", envIntOr("SURGE_MAX_CONNS", 0), "cap on open client connections; at the cap the longest-idle one is closed for a new one, or the new one gets 503 if all are busy. 0 means the open-file limit minus max(64, 10%) kept for the log and snapshots; more than that is refused (SURGE_MAX_CONNS)")
	f.DurationVar(&cfg.IdleTimeout, "idle-timeout", envDurationOr("SURGE_IDLE_TIMEOUT", 30*time.Second), "close a keep-alive connection with no request in flight, or a new one that has sent nothing, after this long (SURGE_IDLE_TIMEOUT)")
	f.IntVar(&cfg.MaxStreams, "max-streams", envIntOr("SURGE_MAX_STREAMS", 128), "concurrent HTTP/2 streams per connection; a client sends more over more connections (SURGE_MAX_STREAMS)")
	f.IntVar(&cfg.MaxInflight, "max-inflight", envIntOr("SURGE_MAX_INFLIGHT", 4096), "requests handled at once over all connections; beyond it a request waits in the waiting room for a slot, first come first served (/healthz, /v1/health_check, /metrics, /debug/pprof/ exempt) (SURGE_MAX_INFLIGHT)")
	f.DurationVar(&cfg.MaxWait, "max-wait", envDurationOr("SURGE_MAX_WAIT", api.DefaultMaxWait), "the waiting room's patience: a request past --max-inflight whose predicted wait for a slot is longer gets 503 at once with Retry-After = that wait; below common clients' 30s per call, leaving 10s for the answer (SURGE_MAX_WAIT)")
	f.IntVar(&cfg.WaitingRoom, "waiting-room", envIntOr("SURGE_WAITING_ROOM", api.DefaultWaitingRoom), "requests waiting at once for an in-flight slot (each holds its stream and handler goroutine, about 5KiB); beyond it 503 with Retry-After = the time the room takes to drain (SURGE_WAITING_ROOM)")
	f.StringVar(&bodyMemory, "max-body-memory", envOr("SURGE_MAX_BODY_MEMORY", "256MiB"), "bytes of large request bodies (over 64KiB) held at once over all requests; a body that does not fit waits, before it is read, until others are answered (up to 30s, then 503 / UNAVAILABLE) (SURGE_MAX_BODY_MEMORY)")
	f.DurationVar(&cfg.Retention, "retention", envDurationOr("SURGE_RETENTION", ticketing.DefaultRetention), "how long a FAILED or CANCELLED reservation stays readable (and its Idempotency-Key remembered) before it is purged; 0 keeps them for ever (SURGE_RETENTION)")
	f.DurationVar(&cfg.MaxQueueDelay, "max-queue-delay", envDurationOr("SURGE_MAX_QUEUE_DELAY", 0), "longest a command may wait in its partition's queue: past half of it new ones get 429 at once (Retry-After = the predicted wait), past it a queued one is refused unapplied; 0 means --max-wait, so a burst served within the clients' patience is never refused; negative turns it off (SURGE_MAX_QUEUE_DELAY)")
	f.DurationVar(&cfg.SagaDeadline, "saga-deadline", envDurationOr("SURGE_SAGA_DEADLINE", 60*time.Second), "how long an order's saga may run before it is compensated (stock released, payment refunded, order CANCELLED) and marked TIMED_OUT; each order logs the deadline it was created with (SURGE_SAGA_DEADLINE)")
	f.DurationVar(&cfg.SagaRetention, "saga-retention", envDurationOr("SURGE_SAGA_RETENTION", commerce.DefaultSagaRetention), "how long an ended order saga (COMPLETED, COMPENSATED, FAILED, TIMED_OUT) stays readable at /api/sagas before it and its bookkeeping are purged; orders, payments and events are kept. 0 keeps them for ever; each order logs the retention it was created with (SURGE_SAGA_RETENTION)")
	f.DurationVar(&cfg.StallTimeout, "stall-timeout", envDurationOr("SURGE_STALL_TIMEOUT", api.DefaultStallTimeout), "a write to a stream's or long poll's reader (SSE, gRPC Read, StreamJobs, ?wait=, waitMs) blocked this long ends it: the reader stopped reading (SURGE_STALL_TIMEOUT)")
	f.StringVar(&streamBuffer, "stream-buffer", envOr("SURGE_STREAM_BUFFER", "256MiB"), "bytes of stream and long-poll pages (each at most 1MiB of messages) rendered and not yet written, over all readers; a page that cannot have its bytes within --stall-timeout ends its stream with reason server_busy (SURGE_STREAM_BUFFER)")
	f.IntVar(&cfg.MaxWaiters, "max-waiters", envIntOr("SURGE_MAX_WAITERS", 10000), "long polls (?wait=, waitMs) and streams woken by notes, open at once; beyond it a long poll still waits its time, looking again every second, and a stream gets 503 / RESOURCE_EXHAUSTED with its own turn as Retry-After (SURGE_MAX_WAITERS)")
	f.DurationVar(&cfg.JobLease, "job-lease", envDurationOr("SURGE_JOB_LEASE", jobs.DefaultLease), "how long a job pushed to a worker stays leased without a heartbeat; past it the job is retried elsewhere (SURGE_JOB_LEASE)")
	f.DurationVar(&cfg.JobRetention, "job-retention", envDurationOr("SURGE_JOB_RETENTION", jobs.DefaultRetention), "how long a finished job (DONE or DEAD_LETTERED) and its log stay readable before they are purged; each job logs the retention it was submitted with (SURGE_JOB_RETENTION)")
	f.IntVar(&cfg.MaxWorkers, "max-workers", envIntOr("SURGE_MAX_WORKERS", jobs.DefaultMaxWorkers), "job workers registered at once; more get RESOURCE_EXHAUSTED (a worker's place is freed when it deregisters, or --worker-grace after it went offline) (SURGE_MAX_WORKERS)")
	f.DurationVar(&cfg.WorkerGrace, "worker-grace", envDurationOr("SURGE_WORKER_GRACE", jobs.DefaultWorkerGrace), "how long a job worker that went offline (no stream, no heartbeat within --job-lease) keeps its place under --max-workers before it is forgotten (SURGE_WORKER_GRACE)")
	f.DurationVar(&cfg.SeqRetention, "seq-retention", envDurationOr("SURGE_SEQ_RETENTION", 24*time.Hour), "how long a released sequencer message stays readable when no consumer has committed past it (with consumers it goes once all have); each message logs the retention it was published with (SURGE_SEQ_RETENTION)")
	f.IntVar(&cfg.SeqProcessors, "seq-processors", envIntOr("SURGE_SEQ_PROCESSORS", sequencer.DefaultBenchProcessors), "goroutines processing the messages of the benchmark routes (POST /messages) (SURGE_SEQ_PROCESSORS)")
	f.BoolVar(&cfg.Pprof, "pprof", envOr("SURGE_PPROF", "") == "1", "serve /debug/pprof/ for profiling (SURGE_PPROF=1)")
	f.IntVar(&cfg.MaxEvents, "max-events", envIntOr("SURGE_MAX_EVENTS", ticketing.DefaultMaxEvents), "events this server holds at most; creating one more is refused with 409 (SURGE_MAX_EVENTS)")
	f.IntVar(&cfg.MaxAreas, "max-areas", envIntOr("SURGE_MAX_AREAS", ticketing.DefaultMaxAreas), "areas over all events this server holds at most; an event that would pass it is refused with 409 (SURGE_MAX_AREAS)")
	f.IntVar(&cfg.MaxSeats, "max-seats", envIntOr("SURGE_MAX_SEATS", ticketing.DefaultMaxSeats), "seats over all areas this server holds at most; an event that would pass it is refused with 409 (SURGE_MAX_SEATS)")
	f.StringVar(&memLimit, "memory-limit", envOr("SURGE_MEMORY_LIMIT", "256MiB"), "soft limit of the Go runtime's memory, e.g. 256MiB or 1GiB, or off: the GC runs more often as the heap nears it. A floor: when the process needs more (live heap plus half of it, at least 64MiB, plus stacks), the limit follows, so the GC never thrashes. GOMEMLIMIT, if set, is fixed and wins (SURGE_MEMORY_LIMIT)")
	f.StringVar(&cfg.Cluster.Kafka, "kafka", envOr("SURGE_KAFKA", ""), "run as a node of a cluster on Apache Kafka at these bootstrap brokers, HOST:PORT[,HOST:PORT...], instead of on --data-dir (see docs/CLUSTER.md) (SURGE_KAFKA)")
	f.StringVar(&cfg.Cluster.Cluster, "cluster", envOr("SURGE_CLUSTER", ""), "with --kafka: the cluster's name; its topics are surge.NAME.log and surge.NAME.snapshots and its group surge.NAME (SURGE_CLUSTER)")
	f.StringVar(&cfg.Cluster.NodeID, "node-id", envOr("SURGE_NODE_ID", ""), "with --kafka: this node's name, unique in the cluster; default HOSTNAME-PORT (SURGE_NODE_ID)")
	f.StringVar(&cfg.Cluster.Advertise, "advertise", envOr("SURGE_ADVERTISE", ""), "with --kafka: HOST:PORT where the other nodes reach this one; default --addr (127.0.0.1 if it has no host) (SURGE_ADVERTISE)")
	f.IntVar(&cfg.Cluster.Replication, "kafka-replication", envIntOr("SURGE_KAFKA_REPLICATION", 1), "with --kafka: replication factor of the topics the cluster creates; use 3 in production (SURGE_KAFKA_REPLICATION)")
	f.DurationVar(&cfg.Cluster.SessionTimeout, "kafka-session-timeout", envDurationOr("SURGE_KAFKA_SESSION_TIMEOUT", 6*time.Second), "with --kafka: how long a silent node keeps its partitions before the others take them over (SURGE_KAFKA_SESSION_TIMEOUT)")
	f.DurationVar(&cfg.Cluster.LogRetention, "kafka-log-retention", envDurationOr("SURGE_KAFKA_LOG_RETENTION", 168*time.Hour), "with --kafka: how long the log topic keeps records when the cluster creates it; every partition must take a snapshot more often (SURGE_KAFKA_LOG_RETENTION)")
	f.DurationVar(&cfg.Cluster.MinCycle, "kafka-min-cycle", envDurationOr("SURGE_KAFKA_MIN_CYCLE", kafkalog.DefaultMinCycle), "with --kafka: a partition starts a Kafka transaction at most this often; appends arriving meanwhile share the next (each transaction costs the broker CPU whatever it holds); negative for none (SURGE_KAFKA_MIN_CYCLE)")
	f.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", 30*time.Second, "how long graceful shutdown waits for in-flight requests")
	return cmd
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
