package engine

import (
	"math"
	"sync/atomic"
	"time"
)

// RecentWeight is the weight of the newest batch in a partition's recent
// figures (PartitionStats.Recent*): an exponentially weighted mean that
// follows the last few dozen batches.
const RecentWeight = 1.0 / 16

// opsStats are a partition's figures for operators, updated once per
// batch: the counters by the partition's goroutine (commit), the commit
// time by the log's completion goroutine (done); each has one writer, so
// plain atomic stores suffice and readers never block the partition.
type opsStats struct {
	applied, batches atomic.Uint64
	recentBatch      atomicFloat
	recentApplyNs    atomicFloat
	recentCommitNs   atomicFloat
}

// atomicFloat is a float64 one goroutine writes and any reads.
type atomicFloat struct{ bits atomic.Uint64 }

func (f *atomicFloat) load() float64 { return math.Float64frombits(f.bits.Load()) }

// mix folds v into the mean; the first value is taken as it is.
func (f *atomicFloat) mix(v float64) {
	old := f.bits.Load()
	if old != 0 {
		v = math.Float64frombits(old)*(1-RecentWeight) + v*RecentWeight
	}
	f.bits.Store(math.Float64bits(v))
}

// applied records a batch of n inputs applied in applyNs, about to be
// handed to the log at appendNano.
func (s *opsStats) appliedBatch(n int, applyNs int64) {
	if n == 0 {
		return
	}
	s.applied.Add(uint64(n))
	s.batches.Add(1)
	s.recentBatch.mix(float64(n))
	s.recentApplyNs.mix(float64(applyNs))
}

// durable records how long a batch took from its append to being durable.
func (s *opsStats) durable(appendNano int64) {
	if appendNano != 0 {
		s.recentCommitNs.mix(float64(time.Now().UnixNano() - appendNano))
	}
}

// PartitionStats is one partition as an operator sees it (GET
// /v1/admin/overview). The counters start at zero when the node starts;
// replay is not counted.
type PartitionStats struct {
	Partition int
	// Served: this node applies the partition (always, embedded).
	Served     bool
	QueueDepth int
	Applied    uint64
	Batches    uint64
	// Recent* are exponentially weighted means over the batches (see
	// RecentWeight): inputs per batch, time to apply and encode one, and
	// time from handing it to the log to its being durable.
	RecentBatch  float64
	RecentApply  time.Duration
	RecentCommit time.Duration
	Position     uint64
}

// Stats reads every partition's figures without stopping any.
func (e *Engine) Stats() []PartitionStats {
	out := make([]PartitionStats, len(e.parts))
	for i, p := range e.parts {
		served := !e.clusterMode() || p.serving.Load()
		out[i] = PartitionStats{
			Partition: i, Served: served, QueueDepth: len(p.inbox),
			Applied: p.ops.applied.Load(), Batches: p.ops.batches.Load(),
			RecentBatch:  p.ops.recentBatch.load(),
			RecentApply:  time.Duration(p.ops.recentApplyNs.load()),
			RecentCommit: time.Duration(p.ops.recentCommitNs.load()),
			Position:     p.lastEnd.Load(),
		}
	}
	return out
}
