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
// group commit, on the real file system (b.TempDir), written directly
// where the file system can (one synchronous write) and through the page
// cache (a write and an fsync), and reports the process CPU per append
// from getrusage: the cost of making one commit durable.
// go test -run x -bench AppendSync8K -benchtime 4000x ./internal/wal
func BenchmarkAppendSync8K(b *testing.B) {
	for _, direct := range []bool{true, false} {
		name := "page-cache"
		if direct {
			name = "direct"
		}
		b.Run(name, func(b *testing.B) {
			l, err := Open(Options{Dir: b.TempDir(), Partitions: 1, SealDelay: -1, NoDirect: !direct})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			if direct && l.df == nil {
				b.Skip("the file system takes no direct writes")
			}
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
		})
	}
}
