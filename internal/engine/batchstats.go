package engine

import (
	"math/bits"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Batch histograms, kept per partition.
//
// Every batch records its size and apply time. With batches of one or two
// commands (a light load on many cores) that is close to every request,
// and one shared prometheus.Histogram would have every processor write the
// same few cache lines, each write pulling them from the core that wrote
// last. So each partition counts its own batches (only its processor
// writes them, so the atomics are uncontended) and the collector sums
// the partitions at scrape time, as delayCollector does for inbox waits.
// The metrics' names, buckets and meaning are those of the shared
// histograms they replace.
const (
	batchSizeBuckets = 12 // 1, 2, 4 … 2048 commands
	applyBuckets     = 10 // 1 µs × 4^i: 1 µs … 262 ms
	applyBaseNs      = 1_000
)

func batchSizeBound(i int) float64 { return float64(int64(1) << i) }
func applyBound(i int) float64     { return float64(int64(applyBaseNs)<<(2*i)) / 1e9 }

// batchHist is one partition's batch sizes and apply times; the last
// count of each is +Inf.
type batchHist struct {
	sizes      [batchSizeBuckets + 1]atomic.Uint64
	sizeSum    atomic.Uint64
	applies    [applyBuckets + 1]atomic.Uint64
	applySumNs atomic.Int64
}

// observe records a batch of n inputs that took ns to apply.
func (h *batchHist) observe(n int, ns int64) {
	h.sizes[sizeBucket(n)].Add(1)
	h.sizeSum.Add(uint64(n))
	h.applies[applyBucket(ns)].Add(1)
	h.applySumNs.Add(ns)
}

// sizeBucket is the first i with n <= 2^i (capped at +Inf).
func sizeBucket(n int) int {
	if n <= 1 {
		return 0
	}
	return min(bits.Len64(uint64(n-1)), batchSizeBuckets)
}

// applyBucket is the first i with ns <= applyBaseNs × 4^i (capped at +Inf).
func applyBucket(ns int64) int {
	if ns <= applyBaseNs {
		return 0
	}
	q := uint64(ns-1) / applyBaseNs
	return min((bits.Len64(q)+1)/2, applyBuckets)
}

// batchCollector exposes every partition's batchHist as the two engine
// histograms.
type batchCollector struct {
	sizeDesc, applyDesc *prometheus.Desc
	parts               []*partition
}

func newBatchCollector(parts []*partition) *batchCollector {
	return &batchCollector{
		sizeDesc: prometheus.NewDesc("surge_engine_batch_commands",
			"Commands applied per partition batch (one log append).", nil, nil),
		applyDesc: prometheus.NewDesc("surge_engine_apply_seconds",
			"Time a partition spends applying and encoding one batch (excludes the fsync).", nil, nil),
		parts: parts,
	}
}

func (c *batchCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.sizeDesc
	ch <- c.applyDesc
}

func (c *batchCollector) Collect(ch chan<- prometheus.Metric) {
	var sizes [batchSizeBuckets + 1]uint64
	var applies [applyBuckets + 1]uint64
	var sizeSum uint64
	var applyNs int64
	for _, p := range c.parts {
		h := &p.batches
		for i := range sizes {
			sizes[i] += h.sizes[i].Load()
		}
		for i := range applies {
			applies[i] += h.applies[i].Load()
		}
		sizeSum += h.sizeSum.Load()
		applyNs += h.applySumNs.Load()
	}
	ch <- constHistogram(c.sizeDesc, sizes[:], batchSizeBound, float64(sizeSum))
	ch <- constHistogram(c.applyDesc, applies[:], applyBound, float64(applyNs)/1e9)
}

// constHistogram builds a histogram from per-bucket counts (the last one
// +Inf) and the bound of each finite bucket.
func constHistogram(d *prometheus.Desc, counts []uint64, bound func(int) float64, sum float64) prometheus.Metric {
	buckets := make(map[float64]uint64, len(counts)-1)
	var cum uint64
	for i := range len(counts) - 1 {
		cum += counts[i]
		buckets[bound(i)] = cum
	}
	return prometheus.MustNewConstHistogram(d, cum+counts[len(counts)-1], sum, buckets)
}
