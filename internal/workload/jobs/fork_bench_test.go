package jobs

import (
	"fmt"
	"testing"

	"github.com/surge-run/surge/internal/engine"
)

// BenchmarkForkPending is a snapshot of a partition holding 12,500
// PENDING jobs (the jobs bench's unary run piles 100,000 on 8
// partitions): the first fork after they were submitted, which encodes
// each job and keeps the encoding (the partition waits for it); a later
// fork, which reuses the encodings; and the encoding the snapshotter
// does after a fork. ns/op and B/op are per job.
//
//	go test -run X -bench ForkPending -benchmem -benchtime 2500000x ./internal/workload/jobs
func BenchmarkForkPending(b *testing.B) {
	const pending = 12_500
	pile := func() *Machine {
		m := NewMachine(Options{OwnsDefault: true, Limits: Limits{MaxJobsPerQueue: 1 << 30}})
		fx := new(engine.Effects)
		payload := []byte(`{"command":["echo","bench"]}`)
		for i := range pending {
			fx.Reset()
			m.Apply(&engine.Input{Kind: engine.FromClient, TimeNs: int64(1e18) + int64(i), Cmd: &Submit{
				JobID: fmt.Sprintf("%08x-0000-4000-8000-000000000000", i), Queue: DefaultQueue, Payload: payload}}, fx)
		}
		return m
	}
	b.Run("first", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N / pending {
			b.StopTimer()
			m := pile()
			b.StartTimer()
			_ = m.ForkSnapshot()
		}
	})
	m := pile()
	var buf []byte
	b.Run("fork", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N / pending {
			_ = m.ForkSnapshot()
		}
	})
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N / pending {
			buf = m.ForkSnapshot()(buf[:0])
		}
	})
}
