// Package server wires the embedded log, the engine, the workloads and the
// HTTP listener into the process that `surge serve` runs.
package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/cluster"
	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/jqpb/jqpbconnect"
	"github.com/surge-run/surge/internal/seqpb/seqpbconnect"
	"github.com/surge-run/surge/internal/vfs"
	"github.com/surge-run/surge/internal/wal"
	"github.com/surge-run/surge/internal/workload/commerce"
	"github.com/surge-run/surge/internal/workload/jobs"
	"github.com/surge-run/surge/internal/workload/sequencer"
	"github.com/surge-run/surge/internal/workload/ticketing"
)

// Config is what `surge serve` takes.
type Config struct {
	Addr          string
	DataDir       string
	Partitions    int
	SnapshotEvery int
	// SnapshotBytes and SnapshotInterval are the other two snapshot
	// triggers (engine.Options): 0 means the engine's default, negative
	// turns the trigger off.
	SnapshotBytes    int64
	SnapshotInterval time.Duration
	SyncInterval     time.Duration
	// MaxQueueDelay is engine.Options.MaxQueueDelay: 0 for the waiting
	// room's patience (--max-wait, see queueDelay), negative for no limit.
	MaxQueueDelay   time.Duration
	ShutdownTimeout time.Duration
	// Connection and request limits (api.Limits; 0 means the default,
	// for MaxConns derived from the open-file limit).
	MaxConns    int
	IdleTimeout time.Duration
	MaxStreams  int
	MaxInflight int
	MaxWait     time.Duration // the waiting room's patience
	WaitingRoom int           // requests waiting for an in-flight slot at most
	// StallTimeout and StreamBuffer bound streams and long polls
	// (api.Limits; 0 means the default).
	StallTimeout time.Duration
	StreamBuffer int64
	// MaxBodyMemory bounds the bytes of large request bodies held at once
	// (api.Limits.BodyMemory; 0: api.DefaultBodyMemory).
	MaxBodyMemory int64
	// Retention is how long FAILED and CANCELLED reservations are kept
	// before they are purged; 0 keeps them for ever.
	Retention time.Duration
	// SagaDeadline is how long an order's saga may run before it is
	// compensated and TIMED_OUT; 0 means 60s. Each order logs its own.
	SagaDeadline time.Duration
	// SagaRetention is how long an ended saga (and its bookkeeping) is
	// kept before it is purged; 0 keeps them for ever. Each order logs
	// its own.
	SagaRetention time.Duration
	// MaxWaiters bounds the order long polls and streams open at once,
	// and separately the sequencer's (lease and output long polls, output
	// streams); 0 means each workload's default.
	MaxWaiters int
	// JobLease is how long a job pushed to a worker stays leased without a
	// heartbeat; 0 means jobs.DefaultLease.
	JobLease time.Duration
	// JobRetention is how long a finished job and its log are kept; 0
	// means jobs.DefaultRetention. Each job logs its own.
	JobRetention time.Duration
	// MaxWorkers bounds the job worker registry; 0 means
	// jobs.DefaultMaxWorkers.
	MaxWorkers int
	// WorkerGrace is how long an offline job worker keeps its place in
	// the registry; 0 means jobs.DefaultWorkerGrace.
	WorkerGrace time.Duration
	// SeqRetention is how long a released sequencer message is kept when
	// no consumer has passed it; 0 means 24h. Each message logs its own.
	SeqRetention time.Duration
	// SeqProcessors is the size of the benchmark routes' processor pool;
	// 0 means sequencer.DefaultBenchProcessors.
	SeqProcessors int
	// Pprof serves net/http/pprof under /debug/pprof/ for profiling.
	Pprof bool
	// MaxEvents, MaxAreas and MaxSeats bound what the server holds over
	// all events; 0 means the ticketing package's default.
	MaxEvents, MaxAreas, MaxSeats int
	// MemoryLimit is the Go runtime's soft memory limit in bytes: 0 means
	// DefaultMemoryLimit, negative means none. GOMEMLIMIT, if set, wins.
	MemoryLimit int64
	Logger      *slog.Logger
	// Cluster, with Kafka set, makes this server a node of a cluster on
	// Apache Kafka instead of an embedded server with a data directory.
	Cluster ClusterConfig
	// Ready, if set, receives the bound address once the server accepts
	// requests (tests listen on port 0).
	Ready chan<- string
}

// DefaultMemoryLimit keeps the heap of a server with about 100 MB of live
// state well under 300 MB resident, while GOGC=400 still spaces collections
// out for smaller states (the limit only bites when heap growth would pass
// it). It is a floor, not a ceiling: when the process needs more (see
// memgov.go), the limit follows, so the collector never thrashes.
const DefaultMemoryLimit = 256 << 20

// memoryLimit applies the soft memory limit unless GOMEMLIMIT is set, and
// returns the one in force (math.MaxInt64: none).
func memoryLimit(cfg Config) int64 {
	if _, set := os.LookupEnv("GOMEMLIMIT"); set {
		return debug.SetMemoryLimit(-1)
	}
	limit := cfg.MemoryLimit
	switch {
	case limit == 0:
		limit = DefaultMemoryLimit
	case limit < 0:
		limit = math.MaxInt64
	}
	debug.SetMemoryLimit(limit)
	return limit
}

// meta is stored in the data directory for operators and tools. The
// partition count decides where every key lives, so it cannot change under
// existing data; the log records it too (in every segment header) and is
// the authority: surge.json must agree with it.
type meta struct {
	FormatVersion int `json:"formatVersion"`
	Partitions    int `json:"partitions"`
}

const (
	metaFormatVersion = 1
	metaFile          = "surge.json"
)

// readMeta returns the partition count in surge.json, or 0 if there is no
// such file.
func readMeta(dir string) (int, error) {
	path := filepath.Join(dir, metaFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var m meta
	if err := json.Unmarshal(b, &m); err != nil {
		return 0, fmt.Errorf("%s is not valid JSON (%v); correct it, or move it aside: the partition count is then read from the log", path, err)
	}
	if m.FormatVersion != metaFormatVersion {
		return 0, fmt.Errorf("%s has format version %d; this binary reads version %d", path, m.FormatVersion, metaFormatVersion)
	}
	if m.Partitions < 1 || m.Partitions > wal.MaxPartitions {
		return 0, fmt.Errorf("%s says \"partitions\": %d, which is not a partition count (1 to %d); correct it, or move it aside: the count is then read from the log",
			path, m.Partitions, wal.MaxPartitions)
	}
	return m.Partitions, nil
}

func writeMeta(dir string, partitions int) error {
	b, _ := json.Marshal(meta{FormatVersion: metaFormatVersion, Partitions: partitions})
	return vfs.WriteFileAtomic(vfs.OS, filepath.Join(dir, metaFile), append(b, '\n'))
}

// openLog opens the log with the partition count the flag, surge.json and
// the log agree on (a new data directory takes the flag, or the default),
// and brings surge.json in line with the log.
func openLog(cfg Config, opts wal.Options) (*wal.Log, error) {
	if cfg.Partitions < 0 || cfg.Partitions > wal.MaxPartitions {
		return nil, fmt.Errorf("--partitions %d: must be between 1 and %d (or 0: the data directory's count, %d for a new one)",
			cfg.Partitions, wal.MaxPartitions, engine.DefaultPartitions)
	}
	inMeta, err := readMeta(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	if cfg.Partitions > 0 && inMeta > 0 && cfg.Partitions != inMeta {
		return nil, flagMetaConflict(cfg, opts, inMeta)
	}
	opts.Partitions = max(cfg.Partitions, inMeta)
	lg, err := wal.Open(opts)
	if errors.Is(err, wal.ErrPartitionsUnknown) {
		opts.Partitions = engine.DefaultPartitions
		lg, err = wal.Open(opts)
	}
	if errors.Is(err, wal.ErrPartitionMismatch) && cfg.Partitions == 0 {
		return nil, fmt.Errorf("%s disagrees with the log, which is the authority: %w. Correct the file's \"partitions\", or move it aside",
			filepath.Join(cfg.DataDir, metaFile), err)
	}
	if err != nil {
		return nil, err
	}
	if n := lg.Partitions(); n != inMeta {
		if err := writeMeta(cfg.DataDir, n); err != nil {
			lg.Close()
			return nil, fmt.Errorf("writing %s: %w", metaFile, err)
		}
	}
	return lg, nil
}

// flagMetaConflict explains why --partitions disagrees with surge.json.
// Where there is a log it is the authority, so it is asked which of the
// two is wrong; without one, surge.json is the only record.
func flagMetaConflict(cfg Config, opts wal.Options, inMeta int) error {
	flagWrong := fmt.Errorf("data directory %s was created with %d partitions; --partitions %d cannot change that (keys would move). Start with --partitions %d or 0",
		cfg.DataDir, inMeta, cfg.Partitions, inMeta)
	opts.Partitions = 0 // as recorded; creates nothing if there is no log
	lg, err := wal.Open(opts)
	if errors.Is(err, wal.ErrPartitionsUnknown) {
		return flagWrong
	}
	if err != nil {
		return err
	}
	n := lg.Partitions()
	if err := lg.Close(); err != nil {
		return err
	}
	metaPath := filepath.Join(cfg.DataDir, metaFile)
	switch n {
	case inMeta:
		return flagWrong
	case cfg.Partitions:
		return fmt.Errorf("%s says %d partitions, but the log, which is the authority, was written with %d, as --partitions says. Correct the file's \"partitions\" to %d, or move it aside",
			metaPath, inMeta, n, n)
	}
	return fmt.Errorf("%w: the log in %s was written with %d partitions, not %d; keys would move to other partitions. Start with --partitions %d (or 0), and correct %s, which says %d",
		wal.ErrPartitionMismatch, opts.Dir, n, cfg.Partitions, n, metaPath, inMeta)
}

// lockDir takes an exclusive lock on the data directory: two processes
// appending to one log would corrupt it. The kernel drops the lock when the
// process dies, so a kill -9 leaves nothing stale behind.
func lockDir(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("data directory %s is in use by another surge process (%v)", dir, err)
	}
	return func() { f.Close() }, nil
}

// Run serves until ctx is cancelled, then shuts down gracefully.
// queueDelay is the partitions' --max-queue-delay: as set, or by default
// the waiting room's patience, so that a partition refuses a command (at
// half of it predicted) only when its wait would approach what a client
// is willing to wait, as the waiting room does. The engine's own default
// (250 ms, refusing at 125 ms predicted) refused bursts that are served
// within a second: the in-flight cap in front already bounds a
// partition's queue, and the waiting room the wait beyond it.
func queueDelay(flag, patience time.Duration) time.Duration {
	if flag != 0 {
		return flag
	}
	return patience
}

func Run(ctx context.Context, cfg Config) error {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 30 * time.Second
	}
	// Checked before recovery, which can take a while, so a bad flag is
	// reported at once.
	exempt := []string{"/healthz", "/v1/health_check", "/metrics", "/actuator/health", "/actuator/health/liveness", "/actuator/health/readiness", "/actuator/info", "/actuator/prometheus", "/debug/pprof/", grpcHealthPath,
		// A worker's stream lasts as long as the worker; the registry
		// bounds them (one per worker), not the in-flight cap.
		jobs.StreamPath,
		// A sequencer Read follows its group for as long as its
		// reader runs; the hub bounds them (--max-waiters).
		sequencer.ReadPath}
	clustered := cfg.Cluster.enabled()
	if clustered {
		// A forwarded call already holds a slot on the node its client
		// reached; refusing it here would fail a request twice counted,
		// and two busy nodes forwarding to each other would refuse each
		// other's calls while their own waited on them.
		exempt = append(exempt, cluster.CallPath)
	}
	limits, err := api.Limits{
		MaxConns:     cfg.MaxConns,
		IdleTimeout:  cfg.IdleTimeout,
		MaxStreams:   cfg.MaxStreams,
		MaxInflight:  cfg.MaxInflight,
		MaxWait:      cfg.MaxWait,
		WaitingRoom:  cfg.WaitingRoom,
		StallTimeout: cfg.StallTimeout,
		StreamBuffer: cfg.StreamBuffer,
		BodyMemory:   cfg.MaxBodyMemory,
		// Health checks, scrapes and profiles must get through an
		// overload.
		Exempt: exempt,
	}.Resolve()
	if err != nil {
		return err
	}
	if cfg.SnapshotEvery < 0 {
		return fmt.Errorf("--snapshot-every %d: must be a positive number of commands (or 0 for the default, %d)", cfg.SnapshotEvery, engine.DefaultSnapshotEvery)
	}
	if cfg.Retention < 0 {
		return fmt.Errorf("--retention %v: must be 0 (keep for ever) or a positive duration such as 15m", cfg.Retention)
	}
	if cfg.SagaDeadline < 0 {
		return fmt.Errorf("--saga-deadline %v: must be a positive duration such as 60s", cfg.SagaDeadline)
	}
	if cfg.JobLease < 0 {
		return fmt.Errorf("--job-lease %v: must be a positive duration such as 30s", cfg.JobLease)
	}
	if cfg.WorkerGrace < 0 {
		return fmt.Errorf("--worker-grace %v: must be a positive duration such as 30s", cfg.WorkerGrace)
	}
	if cfg.SeqRetention < 0 {
		return fmt.Errorf("--seq-retention %v: must be a positive duration such as 24h", cfg.SeqRetention)
	}
	if cfg.SeqProcessors < 0 {
		return fmt.Errorf("--seq-processors %d: must be positive (or 0 for the default)", cfg.SeqProcessors)
	}
	if cfg.JobRetention < 0 {
		return fmt.Errorf("--job-retention %v: must be a positive duration such as 24h", cfg.JobRetention)
	}
	if cfg.SagaRetention < 0 {
		return fmt.Errorf("--saga-retention %v: must be 0 (keep for ever) or a positive duration such as 15m", cfg.SagaRetention)
	}
	if _, set := os.LookupEnv("GOGC"); !set {
		// State lives in memory and the machine has plenty; collecting
		// less often takes GC work off the request path.
		debug.SetGCPercent(400)
	}
	for _, l := range []struct {
		flag string
		v    int
	}{{"--max-events", cfg.MaxEvents}, {"--max-areas", cfg.MaxAreas}, {"--max-seats", cfg.MaxSeats}} {
		if l.v < 0 {
			return fmt.Errorf("%s %d: must be positive (or 0 for the default)", l.flag, l.v)
		}
	}
	var (
		ccfg ClusterConfig
		ln   net.Listener
	)
	if clustered {
		if ccfg, err = cfg.Cluster.resolve(cfg.Addr, logger); err != nil {
			return err
		}
		// Listening first lets a node started on port 0 advertise the
		// port it got; connections wait in the backlog until it serves.
		if ln, err = net.Listen("tcp", cfg.Addr); err != nil {
			return err
		}
		defer ln.Close()
		ccfg.Advertise = advertisePort(ccfg.Advertise, ln)
	}
	memLimit := memoryLimit(cfg)
	if _, set := os.LookupEnv("GOMEMLIMIT"); !set && memLimit != math.MaxInt64 {
		gctx, stopGovernor := context.WithCancel(context.Background())
		defer stopGovernor()
		go governMemory(gctx, memLimit)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector())
	fsync := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "surge_wal_fsync_seconds",
		Help:    "Time of one group commit: write plus fsync.",
		Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16),
	})
	syncRecords := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "surge_wal_group_commit_records",
		Help:    "Records made durable by one fsync (all partitions).",
		Buckets: prometheus.ExponentialBuckets(1, 2, 14),
	})

	start := time.Now()
	var (
		parts int
		// closeLog closes what the engine would have closed had it
		// opened: the embedded log, or the node's Kafka clients.
		closeLog func()
		node     *cluster.Node
		engOpts  = engine.Options{
			SnapshotEvery:    cfg.SnapshotEvery,
			SnapshotBytes:    cfg.SnapshotBytes,
			SnapshotInterval: cfg.SnapshotInterval,
			MaxQueueDelay:    queueDelay(cfg.MaxQueueDelay, limits.MaxWait),
			Metrics:          engine.NewMetrics(reg),
			Logger:           logger,
		}
	)
	if clustered {
		node, err = openCluster(ctx, cfg, ccfg, logger, reg)
		if err != nil {
			return err
		}
		defer node.Close()
		closeLog = func() {}
		parts = node.Partitions()
		engOpts.Snapshots = node.Snapshots()
		engOpts.Cluster = node.EngineCluster()
	} else {
		if err := vfs.OS.MkdirAll(cfg.DataDir); err != nil {
			return err
		}
		unlock, err := lockDir(cfg.DataDir)
		if err != nil {
			return err
		}
		defer unlock()
		reg.MustRegister(fsync, syncRecords)
		lg, err := openLog(cfg, wal.Options{
			Dir:          filepath.Join(cfg.DataDir, "wal"),
			SyncInterval: cfg.SyncInterval,
			OnSync: func(d time.Duration, records, _ int) {
				fsync.Observe(d.Seconds())
				syncRecords.Observe(float64(records))
			},
		})
		if err != nil {
			return err
		}
		parts = lg.Partitions()
		if rec := lg.Recovery(); rec.File != "" {
			logger.Warn("cut a torn write (never acknowledged) from the end of the log", "file", rec.File, "bytes", rec.TruncatedBytes)
		}
		snaps, err := wal.OpenSnapshotDir(vfs.OS, filepath.Join(cfg.DataDir, "snapshots"))
		if err != nil {
			lg.Close()
			return err
		}
		closeLog = func() { lg.Close() }
		engOpts.Log = lg
		engOpts.Snapshots = snaps
	}
	engOpts.Partitions = parts
	// The hub exists before the engine, whose recovery may already
	// complete commands that notify.
	hub := commerce.NewHub(cfg.MaxWaiters)
	jobHub := jobs.NewHub(cfg.MaxWorkers).SetGrace(cfg.WorkerGrace)
	seqHub := sequencer.NewHub(cfg.MaxWaiters)
	engOpts.Notify = func(_ int, wl uint8, v any) {
		switch wl {
		case commerce.WorkloadID:
			hub.Notify(v)
		case jobs.WorkloadID:
			jobHub.Notify(v)
		case sequencer.WorkloadID:
			seqHub.Notify(v)
		}
	}
	eng, err := engine.Open(engOpts, ticketing.Workload{}, commerce.Workload{}, &jobs.Workload{Partitions: parts}, &sequencer.Workload{})
	if err != nil {
		closeLog()
		return err
	}
	// Recovery decodes every snapshot and replays the log tail, leaving
	// garbage several times the live state that GOGC=400 would let the
	// heap keep until long after the server is serving. One forced
	// collection now, before any request waits on it, returns it to the OS.
	debug.FreeOSMemory()

	var ready atomic.Bool
	mux := http.NewServeMux()
	m := api.NewMetrics(reg)
	health := func(w http.ResponseWriter, r *http.Request) int {
		if !ready.Load() {
			return api.Error(w, http.StatusServiceUnavailable, "not ready")
		}
		if eng.Failed() {
			return api.Error(w, http.StatusServiceUnavailable, "the command log failed; this node refuses all requests until it is restarted")
		}
		if node != nil {
			// The first line stays "ok" for existing probes.
			api.Write(w, http.StatusOK, false, []byte("ok\n"+ownedLine(node)))
			return http.StatusOK
		}
		api.Write(w, http.StatusOK, false, []byte("ok\n"))
		return http.StatusOK
	}
	m.Handle(mux, "GET /healthz", health)
	m.Handle(mux, "GET /v1/health_check", health)
	// The Spring Boot actuator's probes, which the commerce peer's tooling uses.
	actuatorHealth := func(w http.ResponseWriter, r *http.Request) int {
		if !ready.Load() || eng.Failed() {
			api.Write(w, http.StatusServiceUnavailable, true, []byte(`{"status":"DOWN"}`+"\n"))
			return http.StatusServiceUnavailable
		}
		api.Write(w, http.StatusOK, true, []byte(`{"status":"UP"}`+"\n"))
		return http.StatusOK
	}
	m.Handle(mux, "GET /actuator/health", actuatorHealth)
	// Kubernetes probes of Spring Boot apps use these two. A failed log
	// needs a restart, so liveness goes DOWN with readiness.
	m.Handle(mux, "GET /actuator/health/liveness", actuatorHealth)
	m.Handle(mux, "GET /actuator/health/readiness", actuatorHealth)
	m.Handle(mux, "GET /actuator/info", func(w http.ResponseWriter, r *http.Request) int {
		api.Write(w, http.StatusOK, true, []byte(`{"app":{"name":"surge"}}`+"\n"))
		return http.StatusOK
	})
	metricsHandler := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	mux.Handle("GET /metrics", metricsHandler)
	mux.Handle("GET /actuator/prometheus", metricsHandler)
	tapi := ticketing.NewAPI(eng).SetRetention(cfg.Retention)
	stateLimits := ticketing.Limits{Events: cfg.MaxEvents, Areas: cfg.MaxAreas, Seats: cfg.MaxSeats}
	if stateLimits.Events == 0 {
		stateLimits.Events = ticketing.DefaultMaxEvents
	}
	if stateLimits.Areas == 0 {
		stateLimits.Areas = ticketing.DefaultMaxAreas
	}
	if stateLimits.Seats == 0 {
		stateLimits.Seats = ticketing.DefaultMaxSeats
	}
	countCtx := ctx
	if clustered {
		// Not one partition is served before the node joins: counting now
		// would wait for owners that cannot come. The count is made at the
		// first event creation instead.
		var cancelCount context.CancelFunc
		countCtx, cancelCount = context.WithCancel(ctx)
		cancelCount()
	}
	used, err := tapi.SetLimits(countCtx, stateLimits)
	if err != nil && !clustered {
		// Counted again at the first event creation.
		logger.Warn("could not count the events this server holds", "err", err)
	}
	tapi.Register(mux, m)
	capi := commerce.NewAPI(eng, hub).SetSagaDeadline(cfg.SagaDeadline).SetSagaRetention(cfg.SagaRetention)
	capi.Register(mux, m)
	reg.MustRegister(capi.DLQCollector())
	sapi := sequencer.NewAPI(eng, seqHub).SetRetention(cfg.SeqRetention).SetBenchProcessors(cfg.SeqProcessors)
	sapi.Register(mux, m)
	healthy := func() bool { return ready.Load() && !eng.Failed() }
	japi := jobs.NewAPI(eng, jobHub).SetLease(cfg.JobLease).SetRetention(cfg.JobRetention).SetHealth(healthy)
	var grpcServices []grpcService
	for _, s := range japi.Handlers(grpcHandlerOptions(jobs.MaxMessageBytes)...) {
		h := s.Handler
		if s.Name == jqpbconnect.WorkerServiceName {
			h = unlimitedStream(h, jobs.StreamPath)
		}
		grpcServices = append(grpcServices, grpcService{name: s.Name, path: s.Path, handler: h, maxMessage: jobs.MaxMessageBytes})
	}
	seqPath, seqHandler := sapi.GRPCHandler(grpcHandlerOptions(sequencer.MaxMessageBytes)...)
	grpcServices = append(grpcServices, grpcService{name: seqpbconnect.SequencerServiceName, path: seqPath,
		handler: unlimitedStream(seqHandler, sequencer.ReadPath, sequencer.LeasePath), maxMessage: sequencer.MaxMessageBytes})
	mountGRPC(mux, m, healthy, grpcServices)
	if node != nil {
		mountCluster(mux, m, node, eng)
	}
	if cfg.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}

	if ln == nil {
		if ln, err = net.Listen("tcp", cfg.Addr); err != nil {
			eng.Close()
			return err
		}
	}
	srv := api.NewServer(cfg.Addr, mux, limits, reg)
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	if node != nil {
		// Serving first: other nodes forward calls as soon as they see
		// this node own a partition.
		if err := node.Join(eng); err != nil {
			srv.Close()
			eng.Close()
			return err
		}
	}
	ready.Store(true)
	where := []any{"data_dir", cfg.DataDir}
	if clustered {
		where = []any{"cluster", ccfg.Cluster, "node_id", ccfg.NodeID, "advertise", ccfg.Advertise, "kafka", ccfg.Kafka}
	}
	logger.Info("surge serving", append(append([]any{"addr", ln.Addr().String()}, where...), "partitions", parts, "ready_after", time.Since(start).Round(time.Millisecond),
		"max_conns", limits.MaxConns, "max_inflight", limits.MaxInflight,
		"max_wait", limits.MaxWait, "waiting_room", limits.WaitingRoom,
		"events", fmt.Sprintf("%d/%d", used.Events, stateLimits.Events), "areas", fmt.Sprintf("%d/%d", used.Areas, stateLimits.Areas),
		"seats", fmt.Sprintf("%d/%d", used.Seats, stateLimits.Seats), "memory_limit", memLimit)...)
	if cfg.Ready != nil {
		cfg.Ready <- ln.Addr().String()
	}

	select {
	case <-ctx.Done():
	case err := <-serveErr:
		eng.Close()
		return err
	}
	logger.Info("shutting down: finishing in-flight requests")
	ready.Store(false)
	capi.Shutdown() // long polls and streams answer now instead of holding the shutdown
	japi.Shutdown() // worker streams end with UNAVAILABLE: workers reconnect
	sapi.Shutdown() // long polls and streams answer now; benchmark processors stop
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if node != nil {
		// Leaving revokes this node's partitions: each is released with a
		// hand-over snapshot before the group gives it to another node,
		// while the listener still answers the calls in flight to it.
		// Requests still arriving here are forwarded to the new owners.
		if err := node.Leave(sctx); err != nil {
			logger.Warn("leaving the cluster's group", "err", err)
		}
		node.Drain(sctx)
	}
	shutErr := srv.Shutdown(sctx)
	if err := eng.Close(); err != nil {
		return fmt.Errorf("closing engine: %w", err)
	}
	logger.Info("stopped cleanly")
	if shutErr != nil && !errors.Is(shutErr, context.DeadlineExceeded) {
		return shutErr
	}
	return nil
}
