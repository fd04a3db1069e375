// Package engine runs workload state machines over a durable command log.
//
// Keys hash to partitions. One processor goroutine per partition owns that
// partition's state (a submitter that finds it idle may build a batch in
// its place, under the same lock: inline.go): it drains its inbox in batches, applies each command to
// the workload's Machine, appends the batch to the shared log and releases
// replies, cross-partition messages and acknowledgements only once the log
// says the batch is durable. The log groups batches of all partitions into
// one write and one fsync. Because applying never waits for the disk, the
// processor works on the next batch while the previous one is being synced;
// anything that observed state (a query, an acknowledgement) is released
// with or after the batch that produced that state, never before.
package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/surge-run/surge/internal/cmdlog"
	"github.com/surge-run/surge/internal/ids"
)

// Limits. Every queue has one, so overload turns into backpressure.
const (
	DefaultPartitions    = 8
	DefaultInboxLen      = 4096
	DefaultMaxBatch      = 1024
	DefaultSnapshotEvery = 100_000
	// DefaultSnapshotBytes and DefaultSnapshotInterval: see Options and
	// docs/BENCHMARKS.md ("Restart after kill -9") for how they were chosen.
	DefaultSnapshotBytes    = 16 << 20
	DefaultSnapshotInterval = 60 * time.Second
	// snapshotLogRatio: the count and byte triggers wait for at least
	// the last snapshot's size divided by this (see snapshotDue).
	snapshotLogRatio = 2
	// snapshotRetryDelay is how soon the time trigger tries again on a
	// partition that still had a batch in flight (its snapshot position
	// must be the end of a durable batch).
	snapshotRetryDelay   = 50 * time.Millisecond
	DefaultMaxQueueDelay = 250 * time.Millisecond
	// maxInflightBatches bounds a partition's batches between apply and
	// durable, and inflightBatchBytes their log bytes (batch.go,
	// holdSlots): many small batches may wait for the log at once, as
	// few large ones as the bytes allow. With 4 batches and no bound in
	// bytes, a processor that had made 4 small batches during one fsync
	// waited for one to come back, and the requests queued meanwhile
	// missed the next group commit (docs/BENCHMARKS.md, "Whose the
	// stalls are"). With 16, a closed loop of 200 callers (the jobs
	// bench's unary run) made 16 batches of one or two requests early in
	// each group commit's wait, and the rest waited in the inbox for that
	// commit to give batches back, 0.5 ms on average, then for the next
	// commit: with 64 they wait 0.2 ms, in ticketing's compat run 0.02
	// ms instead of 0.27, at the same CPU (BENCHMARKS, "Batches in
	// flight"; 256 would let overload put too many applied requests
	// before the log, past the inbox's admission). The bytes bound is
	// unchanged, so an idle batch's buffer kept for reuse is smaller
	// (reset drops larger ones). Batches are made as first needed.
	maxInflightBatches = 64
	// keptBatchInputs bounds the inputs an idle batch keeps room for:
	// the 64 idle batches keep what 16 batches of DefaultMaxBatch did.
	keptBatchInputs    = DefaultMaxBatch * 16 / maxInflightBatches
	inflightBatchBytes = 4 * MaxBatchBytes
	inflightSlotBytes  = inflightBatchBytes / maxInflightBatches
	snapshotQueueLen   = 64
	maxPartitions      = 1 << 12

	// MaxBatchBytes bounds the log bytes of one batch (one append), so
	// that with commands of up to cmdlog.MaxEntryBytes a partition's
	// in-flight batches hold tens of megabytes, not gigabytes, and one
	// WAL write or Kafka transaction stays that size. Client requests are
	// taken into a batch only while the largest legal entry still fits
	// below it, with room kept for one entry of pending mail and for
	// timerBatchBytes of due timers; those wait for the next batch too
	// once their share is full. A single command of cmdlog.MaxEntryBytes
	// always fits a batch alone.
	MaxBatchBytes   = 2*cmdlog.MaxEntryBytes + timerBatchBytes
	timerBatchBytes = 4 << 20
)

// SnapshotStore keeps each partition's latest snapshot and the log position
// it covers (every record of that partition before the position).
type SnapshotStore interface {
	Write(partition uint32, pos cmdlog.Position, data []byte) error
	Latest(partition uint32) (pos cmdlog.Position, data []byte, ok bool, err error)
}

// Options configure an Engine. Log and Snapshots are required.
type Options struct {
	Partitions    int
	Log           cmdlog.Log
	Snapshots     SnapshotStore
	InboxLen      int
	MaxBatch      int
	SnapshotEvery int // commands applied in a partition between snapshots
	// SnapshotBytes bounds the log a restart replays, over all
	// partitions: once the partitions have logged that much since their
	// last snapshots (records replayed at startup included), each that
	// holds at least its share of what they logged (the total divided by
	// Partitions) snapshots with its next batch. Replay time follows the
	// bytes replayed more closely than the commands (a command may be a
	// batch of thousands). 0 means DefaultSnapshotBytes; negative turns
	// this trigger off.
	SnapshotBytes int64
	// SnapshotInterval: a partition that logged anything since its last
	// snapshot takes one at most this long after it, even if it has gone
	// quiet (a partition that logged nothing is never snapshotted again).
	// A changed partition otherwise pins the whole log: segments are
	// released only up to the oldest position a partition still needs.
	// 0 means DefaultSnapshotInterval; negative turns this trigger off.
	SnapshotInterval time.Duration
	// MaxQueueDelay bounds how long a client command waits in its
	// partition's inbox before the processor starts it (see
	// admission.go). 0 means DefaultMaxQueueDelay; negative turns the
	// limit off, leaving only the full inbox to refuse work.
	MaxQueueDelay time.Duration
	Metrics       *Metrics
	Logger        *slog.Logger
	// Notify receives what Machines pass to Effects.Notify, in apply order
	// per partition, once the command that made it is durable. It runs on
	// the log's completion goroutine, so it must not block.
	Notify func(partition int, workload uint8, v any)
	// Notes routes notes by workload: a note goes to the function of the
	// workload whose Machine made it (the module that owns the workload),
	// as Notify does and on the same goroutine. A workload without an
	// entry has its notes go to Notify alone. See routeNotes.
	Notes map[uint8]func(partition int, v any)
	// Tracer, when set, is told where traced requests spent their time
	// (see tracehook.go); nil (the default) records nothing.
	Tracer Tracer
	// Cluster, when set, makes this engine one node of a cluster (see
	// cluster.go): Log is then unused, and partitions are served only
	// between Acquire and Release.
	Cluster *Cluster

	// For the crash simulation, which needs every file operation on one
	// goroutine and time it controls: now replaces the clock, and
	// inlineSnapshots writes snapshots on the log's completion goroutine
	// (and one after another on Close) instead of on the snapshotter.
	now             func() int64
	inlineSnapshots bool
	// shedMinQueue: see defaultShedMinQueue; tests lower it to shed with
	// few submitters.
	shedMinQueue int
	// batchBytes, for tests, is told the log bytes of every batch.
	batchBytes func(n int)
	// noInlineApply, for tests and benchmarks, leaves every batch to the
	// processor (see inline.go).
	noInlineApply bool
}

// Engine owns the partitions. Create with Open, stop with Close.
type Engine struct {
	opts      Options
	parts     []*partition
	workloads map[uint8]Workload

	mu     sync.RWMutex // writers: Close; readers: isClosed, Acquire
	closed bool
	failed atomic.Bool
	// doneEnd is the end of the newest batch whose done callback has
	// finished; every partition's lastEnd is up to date below it.
	doneEnd atomic.Uint64

	// unsnapped is the log the partitions of this engine have written
	// (or replayed) since their last snapshots: what a restart would
	// replay. The byte trigger spends Options.SnapshotBytes on it as a
	// whole (see logBudgetDue), so one busy partition does not snapshot
	// at an eighth of the bound while the others log nothing.
	unsnapped atomic.Int64

	// mono is a monotonic clock in nanoseconds for queue delays (the
	// workload's clock, opts.now, may be simulated). maxWaitNs is the
	// longest a command may wait in an inbox and admitNs the estimated
	// wait above which new commands are refused; both 0 when off.
	mono      func() int64
	maxWaitNs int64
	admitNs   int64

	stop    chan struct{}
	wg      sync.WaitGroup
	snapCh  chan snapJob
	snapWG  sync.WaitGroup
	courier *courier    // cluster mode
	fwd     []forwarder // cluster mode, per partition
	reqPool sync.Pool
	log     *slog.Logger
}

// Open recovers state from the snapshots and the log, then starts one
// processor per partition.
func Open(opts Options, workloads ...Workload) (*Engine, error) {
	e, err := recovered(opts, workloads...)
	if err != nil {
		return nil, err
	}
	e.start()
	return e, nil
}

// recovered builds the engine and recovers its state without starting
// anything, so that the crash simulation can inspect what recovery built.
func recovered(opts Options, workloads ...Workload) (*Engine, error) {
	if err := opts.fillDefaults(); err != nil {
		return nil, err
	}
	e := &Engine{
		opts:      opts,
		workloads: make(map[uint8]Workload),
		stop:      make(chan struct{}),
		snapCh:    make(chan snapJob, snapshotQueueLen),
		log:       opts.Logger,
	}
	epoch := time.Now()
	e.mono = func() int64 { return int64(time.Since(epoch)) }
	if opts.MaxQueueDelay > 0 {
		e.maxWaitNs = int64(opts.MaxQueueDelay)
		// Admit against half the limit: the estimate is an average, and
		// what is admitted should start well before it would be shed.
		e.admitNs = e.maxWaitNs / 2
	}
	e.reqPool.New = func() any { return &Request{done: make(chan struct{}, 1)} }
	for _, w := range workloads {
		if _, dup := e.workloads[w.ID()]; dup || w.ID() == 0xff {
			return nil, fmt.Errorf("engine: workload id %d used twice or reserved", w.ID())
		}
		e.workloads[w.ID()] = w
	}
	if err := e.routeNotes(); err != nil {
		return nil, err
	}
	e.parts = make([]*partition, opts.Partitions)
	for i := range e.parts {
		e.parts[i] = newPartition(e, i)
	}
	if opts.Cluster != nil {
		registerWireTypes(e.workloads)
		e.fwd = make([]forwarder, opts.Partitions)
		e.courier = &courier{e: e, queued: make(map[int][]mail), signal: make(chan struct{}, 1), done: make(chan struct{})}
		return e, nil // partitions are recovered one by one, by Acquire
	}
	if err := e.recover(); err != nil {
		return nil, err
	}
	if w, ok := opts.Log.(cmdlog.CommitWaiter); ok {
		// Every partition's batches share the log's group commits.
		w.OnWait(releaseOnWait(w, e.parts))
	}
	return e, nil
}

// fillDefaults checks the options and puts the default in every limit
// left zero.
func (o *Options) fillDefaults() error {
	if o.Cluster != nil {
		if o.Cluster.Transport == nil || o.Snapshots == nil {
			return errors.New("engine: cluster mode needs Options.Cluster.Transport and Options.Snapshots")
		}
		if o.Cluster.ResendAfter <= 0 {
			o.Cluster.ResendAfter = defaultResendAfter
		}
		if o.Cluster.ForwardTimeout <= 0 {
			o.Cluster.ForwardTimeout = defaultForwardTimeout
		}
	} else if o.Log == nil || o.Snapshots == nil {
		return errors.New("engine: Options.Log and Options.Snapshots are required")
	}
	if o.Partitions <= 0 {
		o.Partitions = DefaultPartitions
	}
	if o.Partitions > maxPartitions {
		return fmt.Errorf("engine: %d partitions is more than the limit of %d", o.Partitions, maxPartitions)
	}
	if o.InboxLen <= 0 {
		o.InboxLen = DefaultInboxLen
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = DefaultMaxBatch
	}
	if o.SnapshotEvery <= 0 {
		o.SnapshotEvery = DefaultSnapshotEvery
	}
	if o.SnapshotBytes == 0 {
		o.SnapshotBytes = DefaultSnapshotBytes
	}
	if o.SnapshotInterval == 0 {
		o.SnapshotInterval = DefaultSnapshotInterval
	}
	if o.shedMinQueue <= 0 {
		o.shedMinQueue = defaultShedMinQueue
	}
	if o.MaxQueueDelay == 0 {
		o.MaxQueueDelay = DefaultMaxQueueDelay
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.now == nil {
		o.now = func() int64 { return time.Now().UnixNano() }
	}
	return nil
}

func (e *Engine) start() {
	if e.opts.Metrics != nil {
		e.opts.Metrics.watch(e)
	}
	e.snapWG.Add(1)
	go e.snapshotter()
	if e.clusterMode() {
		go e.courier.run(e.stop)
		return
	}
	for _, p := range e.parts {
		e.wg.Add(1)
		go p.run()
	}
}

// Partitions is the number of partitions.
func (e *Engine) Partitions() int { return len(e.parts) }

// Failed reports whether the log failed: the engine then refuses all work
// until the process restarts.
func (e *Engine) Failed() bool { return e.failed.Load() }

func (e *Engine) now() int64 { return e.opts.now() }

// dropped reports an input that could not be applied. The live path and
// replay drop the same inputs, so state stays identical.
func (e *Engine) dropped(what string, part int, err error) {
	e.log.Error("dropping an input that cannot be applied", "kind", what, "partition", part, "err", err)
	if m := e.opts.Metrics; m != nil {
		m.Dropped.Inc()
	}
}

// PartitionOf maps a key to its partition.
func (e *Engine) PartitionOf(key string) int { return PartitionOfHash(Hash(key), len(e.parts)) }

// Hash is the key hash (ids.Hash, FNV-1a); HashMore continues it, so
// callers can hash a composite key without building it as a string.
func Hash(s string) uint64 { return ids.Hash(s) }

// HashMore continues Hash over s.
func HashMore(h uint64, s string) uint64 { return ids.HashMore(h, s) }

// PartitionOfHash maps a key hash to one of n partitions.
func PartitionOfHash(h uint64, n int) int { return int(h % uint64(n)) }

// Request is one command or query in flight.
type Request struct {
	workload uint8
	cmd      Command
	query    any
	result   any
	err      error
	done     chan struct{}
	ctx      context.Context
	enq      int64 // e.mono() when it entered the inbox
	ahead    int   // requests in the inbox when it entered
	part     int
	// Set only when Options.Tracer says ctx is traced (tracehook.go).
	traced bool
	tc     TraceContext // zero unless WithTraceContext named one
	tEnq   int64
	tBatch *BatchTrace
}

// Do submits cmd to the workload's machine in partition part and waits for
// its reply, which arrives only after the command is durable.
func (e *Engine) Do(ctx context.Context, part int, wl uint8, cmd Command) (any, error) {
	if cmd == nil {
		return nil, errors.New("engine: nil command")
	}
	return e.submit(ctx, part, wl, cmd, nil)
}

// Query asks the workload's machine in partition part a read-only question.
// The answer is released only once every command it may reflect is durable.
func (e *Engine) Query(ctx context.Context, part int, wl uint8, q any) (any, error) {
	return e.submit(ctx, part, wl, nil, q)
}

// QueryAll asks every partition's machine of the workload q at once and
// returns the answers in partition order (for lists that span partitions).
func (e *Engine) QueryAll(ctx context.Context, wl uint8, q any) ([]any, error) {
	out := make([]any, len(e.parts))
	errs := make([]error, len(e.parts))
	var wg sync.WaitGroup
	for p := range e.parts {
		wg.Go(func() { out[p], errs[p] = e.Query(ctx, p, wl, q) })
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

func (e *Engine) submit(ctx context.Context, part int, wl uint8, cmd Command, q any) (any, error) {
	if part < 0 || part >= len(e.parts) {
		return nil, fmt.Errorf("engine: partition %d out of range [0,%d)", part, len(e.parts))
	}
	if _, ok := e.workloads[wl]; !ok {
		return nil, fmt.Errorf("engine: unknown workload %d", wl)
	}
	res, err := e.submitLocal(ctx, part, wl, cmd, q)
	if errors.Is(err, errMoved) {
		return e.forward(ctx, part, wl, cmd, q)
	}
	return res, err
}

// submitLocal runs a request on this node's processor of part; in cluster
// mode it answers errMoved, having done nothing, if the partition is not
// served here or stops being served before the request is applied.
func (e *Engine) submitLocal(ctx context.Context, part int, wl uint8, cmd Command, q any) (any, error) {
	if _, ok := e.workloads[wl]; !ok {
		return nil, fmt.Errorf("engine: unknown workload %d", wl)
	}
	if e.failed.Load() {
		return nil, ErrFailed
	}
	p := e.parts[part]
	// The request enters the inbox under subMu, so that Close (and in
	// cluster mode Release) knows when no request can enter any more.
	p.subMu.RLock()
	if e.clusterMode() && (!p.serving.Load() || p.failed.Load()) {
		p.subMu.RUnlock()
		return nil, errMoved
	}
	r, err := e.enqueue(p, ctx, wl, cmd, q)
	if err == nil {
		p.serveOrKick(cmd == nil)
	}
	p.subMu.RUnlock()
	if err != nil {
		return nil, err
	}
	return e.await(ctx, r)
}

// await waits for a queued request's answer and recycles the request.
func (e *Engine) await(ctx context.Context, r *Request) (any, error) {
	// A context that can never be done (a lean HTTP/1.1 request's) waits
	// with a plain receive: a select on two channels locks both.
	if done := ctx.Done(); done == nil {
		<-r.done
	} else {
		select {
		case <-r.done:
		case <-done:
			// The request stays owned by the processor; it is not recycled.
			return nil, ctx.Err()
		}
	}
	res, err := r.result, r.err
	if r.traced {
		e.traceFinished(ctx, r.part, r)
	}
	r.cmd, r.query, r.result, r.err, r.ctx = nil, nil, nil, nil, nil
	e.reqPool.Put(r)
	return res, err
}

// enqueue puts a request in p's inbox. The caller holds p.subMu (read):
// the gate Close shuts partition by partition. It is per partition, not
// one lock of the engine's, because every request passes it: one shared
// reader count would be a cache line all cores write on every request.
func (e *Engine) enqueue(p *partition, ctx context.Context, wl uint8, cmd Command, q any) (*Request, error) {
	ahead := len(p.inbox)
	if cmd != nil {
		if wait, busy := p.tooBusy(ahead); busy {
			p.shed(shedQueueDelay)
			return nil, &overloaded{err: ErrOverloaded, wait: wait}
		}
	}
	r := e.reqPool.Get().(*Request)
	r.workload, r.cmd, r.query, r.ctx, r.ahead = wl, cmd, q, ctx, ahead
	r.enq = e.mono()
	r.part = p.id
	e.traceEnqueue(ctx, r)
	if p.closed {
		r.ctx, r.traced, r.tc = nil, false, TraceContext{}
		e.reqPool.Put(r)
		return nil, ErrClosed
	}
	select {
	case p.inbox <- r:
		return r, nil
	default:
		r.ctx, r.traced, r.tc = nil, false, TraceContext{}
		e.reqPool.Put(r)
		p.shed(shedInboxFull)
		return nil, &overloaded{err: ErrOverloaded, wait: p.waitBehind(ahead)}
	}
}

// Close stops accepting requests, finishes and syncs every batch already
// accepted, writes a snapshot of every partition that changed (so the next
// start replays little), and closes the log.
func (e *Engine) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	e.mu.Unlock()
	for _, p := range e.parts {
		// Once taken, every submitter that got past the gate has its
		// request in the inbox, and later ones see closed.
		p.subMu.Lock()
		p.closed = true
		p.subMu.Unlock()
	}
	if e.clusterMode() {
		return e.closeCluster()
	}
	if w, ok := e.opts.Log.(cmdlog.CommitWaiter); ok {
		// The batches in flight are all that comes: no reason to wait
		// for more to share their commit.
		w.Hurry()
	}
	close(e.stop)
	e.wg.Wait()
	close(e.snapCh)
	e.snapWG.Wait()

	var firstErr error
	if !e.failed.Load() {
		// Processors have stopped, so each partition's state can be
		// encoded and written in parallel.
		end := e.opts.Log.End()
		errs := make([]error, len(e.parts))
		var wg sync.WaitGroup
		for i, p := range e.parts {
			if p.lastEnd.Load() <= p.snapPos.Load() {
				continue
			}
			write := func() {
				data := p.appendSnapshot(make([]byte, 0, p.snapshotBufSize()))
				if errs[i] = e.opts.Snapshots.Write(uint32(p.id), end, data); errs[i] == nil {
					p.snapPos.Store(uint64(end))
				}
			}
			if e.opts.inlineSnapshots {
				write()
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				write()
			}()
		}
		wg.Wait()
		firstErr = errors.Join(errs...)
		if firstErr == nil {
			if err := e.release(); err != nil {
				firstErr = err
			}
		}
	}
	if err := e.opts.Log.Close(); err != nil && firstErr == nil {
		firstErr = err
	}
	return firstErr
}

// fail is called when the log cannot make a batch durable. The state in
// memory is then ahead of the disk, so the engine refuses all further work.
func (e *Engine) fail(err error) {
	if e.failed.CompareAndSwap(false, true) {
		e.log.Error("command log failed; refusing all requests until restart", "err", err)
	}
}
