package engine

import "github.com/surge-run/surge/internal/wire"

// SetShedMinQueue lowers the queue length from which requests are shed by
// delay, so a test can overload a partition with few submitters.
func SetShedMinQueue(o *Options, n int) { o.shedMinQueue = n }

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
