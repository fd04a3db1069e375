package engine_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/wal"
)

// BenchmarkSubmitParallel measures the engine's own CPU per request as
// cores multiply: many callers submit transfers to keys spread over the
// partitions, with the engine's metrics on and a WAL that skips fsync (so
// the figure is CPU, not disk). Compare per-request CPU across -cpu:
//
//	go test -run XXX -bench SubmitParallel -cpu 2,8 ./internal/engine/
//
// cpu-ns/op is user+system time of the whole process per request; on a
// machine with fewer cores than -cpu it still shows what extra Ps cost
// (idle Ps woken and put back to sleep, cache lines shared between them).
func BenchmarkSubmitParallel(b *testing.B) {
	for _, parts := range []int{8, 32} {
		for _, op := range []string{"transfer", "query"} {
			for _, inline := range []bool{true, false} {
				name := "partitions=" + strconv.Itoa(parts) + "/op=" + op + "/inline=" + strconv.FormatBool(inline)
				b.Run(name, func(b *testing.B) { benchSubmit(b, parts, op == "query", inline) })
			}
		}
	}
}

func benchSubmit(b *testing.B, parts int, query, inline bool) {
	dir := b.TempDir()
	e := openEngineWith(b, dir, func(o *engine.Options) {
		o.Partitions = parts
		if !inline {
			engine.NoInlineApply(o)
		}
		o.Metrics = engine.NewMetrics(prometheus.NewRegistry())
		lg, err := wal.Open(wal.Options{Dir: filepath.Join(dir, "wal"), Partitions: parts, NoSync: benchNoSync})
		if err != nil {
			b.Fatal(err)
		}
		o.Log = lg
	})
	defer e.Close()
	var next atomic.Uint64
	b.SetParallelism(32)
	cpu0 := cpuNs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := next.Add(1)
			from := "k" + strconv.FormatUint(i%256, 10)
			var err error
			if query {
				_, err = e.Query(context.Background(), e.PartitionOf(from), 7, getAccount{Key: from})
			} else {
				_, err = e.Do(context.Background(), e.PartitionOf(from), 7, &transfer{From: from, To: from, N: 1})
			}
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(cpuNs()-cpu0)/float64(b.N), "cpu-ns/op")
	var applied, batches uint64
	for _, st := range e.Stats() {
		applied += st.Applied
		batches += st.Batches
	}
	b.ReportMetric(float64(applied)/float64(max(1, batches)), "inputs/batch")
}

func cpuNs() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// benchNoSync: BenchmarkSubmitParallel's WAL skips fsync unless
// SURGE_BENCH_FSYNC is set (then batches wait for the disk, as in
// service, and grow accordingly).
var benchNoSync = os.Getenv("SURGE_BENCH_FSYNC") == ""
