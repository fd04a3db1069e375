package engine

import (
	"context"

	"github.com/surge-run/surge/internal/wire"
)

// SetShedMinQueue lowers the queue length from which requests are shed by
// delay, so a test can overload a partition with few submitters.
func SetShedMinQueue(o *Options, n int) { o.shedMinQueue = n }

// ObserveBatchBytes has fn told the log bytes of every batch a processor
// commits.
func ObserveBatchBytes(o *Options, fn func(n int)) { o.batchBytes = fn }

// InboxLen is how many requests wait in partition part's inbox.
func InboxLen(e *Engine, part int) int { return len(e.parts[part].inbox) }

// Parked says whether partition part's processor is parked or about to
// park: it then takes its inbox only when kicked.
func Parked(e *Engine, part int) bool { return e.parts[part].parked.Load() }

// PendingForwards is how many requests wait to be forwarded to part.
func PendingForwards(e *Engine, part int) int {
	f := &e.fwd[part]
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.pending)
}

// SetClock replaces the engine's clock (what machines and the snapshot
// time trigger see), so a test can move time on at will.
func SetClock(o *Options, now func() int64) { o.now = now }

// SnapshotRecords is how many of its partition's log records a partition
// snapshot covers.
func SnapshotRecords(data []byte) uint64 {
	r := wire.Reader{B: data}
	r.U32() // version
	r.U32() // partition
	r.U32() // partition count
	return r.U64()
}

// RecoveredOutboxes recovers an engine from opts without starting it and
// returns how many messages its outboxes hold (what it would re-send),
// then closes the log.
func RecoveredOutboxes(opts Options, workloads ...Workload) (int, error) {
	e, err := recovered(opts, workloads...)
	if err != nil {
		opts.Log.Close()
		return 0, err
	}
	n := 0
	for _, p := range e.parts {
		n += len(p.outbox)
	}
	return n, opts.Log.Close()
}

// TimerTraces is how many timers of partition part keep a trace context.
func TimerTraces(e *Engine, part int) int {
	v, err := e.Query(context.Background(), part, 7, partitionProbe(func(p *partition) any { return len(p.timerTraces) }))
	if err != nil {
		panic(err)
	}
	return v.(int)
}

// NoInlineApply leaves every batch to the partition's processor, as before
// submitters could serve an idle partition themselves (inline.go).
func NoInlineApply(o *Options) { o.noInlineApply = true }

// ProcessorServed is how many batches with client requests partition
// part's processor built (the rest were served by their submitters).
func ProcessorServed(e *Engine, part int) uint64 { return e.parts[part].procServed.Load() }

// UnsnappedBytes is the log the engine's partitions wrote or replayed
// since their last snapshots.
func UnsnappedBytes(e *Engine) int64 { return e.unsnapped.Load() }
