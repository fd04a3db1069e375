package engine

import (
	"math"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestBatchBucketsMatchTheSharedHistograms: the per-partition counts put
// every value in the bucket prometheus.Histogram did (first bound >= v,
// the buckets being ExponentialBuckets(1, 2, 12) and (1e-6, 4, 10)).
func TestBatchBucketsMatchTheSharedHistograms(t *testing.T) {
	want := func(bounds []float64, v float64) int {
		for i, b := range bounds {
			if v <= b {
				return i
			}
		}
		return len(bounds)
	}
	sizes := prometheus.ExponentialBuckets(1, 2, batchSizeBuckets)
	for n := range 5000 {
		if got, w := sizeBucket(n), want(sizes, float64(n)); got != w {
			t.Fatalf("batch of %d: bucket %d, want %d", n, got, w)
		}
	}
	applies := prometheus.ExponentialBuckets(1e-6, 4, applyBuckets)
	for i := range applies {
		if b := applyBound(i); math.Abs(b-applies[i]) > 1e-15 {
			t.Fatalf("apply bound %d = %g, want %g", i, b, applies[i])
		}
	}
	for _, ns := range []int64{0, 1, 999, 1000, 1001, 3999, 4000, 4001, 16000, 16001, 1 << 20, 262_144_000, 262_144_001, 1e12} {
		if got, w := applyBucket(ns), want(applies, float64(ns)/1e9); got != w {
			t.Errorf("apply of %d ns: bucket %d, want %d", ns, got, w)
		}
	}
}

// TestBatchCollectorSumsPartitions: what the partitions counted is
// exposed as one histogram per metric, summed over partitions.
func TestBatchCollectorSumsPartitions(t *testing.T) {
	parts := []*partition{{}, {}, {}}
	parts[0].batches.observe(1, 500)
	parts[1].batches.observe(3, 5_000)
	parts[2].batches.observe(3000, 1e9)
	reg := prometheus.NewRegistry()
	reg.MustRegister(newBatchCollector(parts))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*dto.Histogram{}
	for _, mf := range mfs {
		got[mf.GetName()] = mf.GetMetric()[0].GetHistogram()
	}
	sz := got["surge_engine_batch_commands"]
	if sz.GetSampleCount() != 3 || sz.GetSampleSum() != 3004 {
		t.Fatalf("batch sizes: count %d sum %g, want 3 and 3004", sz.GetSampleCount(), sz.GetSampleSum())
	}
	cum := map[float64]uint64{}
	for _, b := range sz.GetBucket() {
		cum[b.GetUpperBound()] = b.GetCumulativeCount()
	}
	if cum[1] != 1 || cum[2] != 1 || cum[4] != 2 || cum[2048] != 2 || len(cum) != batchSizeBuckets {
		t.Fatalf("batch size buckets %v", cum)
	}
	ap := got["surge_engine_apply_seconds"]
	if ap.GetSampleCount() != 3 || math.Abs(ap.GetSampleSum()-1.0000055) > 1e-9 {
		t.Fatalf("apply: count %d sum %g", ap.GetSampleCount(), ap.GetSampleSum())
	}
}
