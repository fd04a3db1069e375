package wal

import (
	"syscall"
	"testing"
	"time"

	"github.com/surge-run/surge/internal/cmdlog"
)

// processCPU is the user plus system CPU time of the whole process.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkAppendSync8K appends 8 KiB records one at a time, each its own
// group commit and fsync, on the real file system (b.TempDir), and reports
// the process CPU per append from getrusage: the cost of one fsync plus
// the write, which is what writing the segment's blocks ahead lowers.
// go test -run x -bench AppendSync8K -benchtime 4000x ./internal/wal
func BenchmarkAppendSync8K(b *testing.B) {
	l, err := Open(Options{Dir: b.TempDir(), Partitions: 1, SealDelay: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	data := make([]byte, 8<<10-frameHeaderSize)
	done := make(chan error, 1)
	entries := []cmdlog.Entry{{Data: data}}
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	cpu0 := processCPU(b)
	for b.Loop() {
		l.Append(entries, func(_, _ cmdlog.Position, err error) { done <- err })
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N)/1e3, "cpu-µs/op")
}
