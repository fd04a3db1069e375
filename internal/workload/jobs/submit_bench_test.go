package jobs

import (
	"context"
	"testing"

	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/engine/enginetest"
	"github.com/surge-run/surge/internal/jqpb"
)

// BenchmarkSubmitJob is Surge's own share of a unary SubmitJob on the
// grpc-go edge (the jobs bench's unary phase): the handler's check and job
// id, the engine's round trip, the partition's encoding, decoding and
// apply, the log's group commit (real fsync) and the reply, with many
// callers at once and no workers, so that the jobs pile up PENDING. Its
// allocs/op are what the server allocates per submit beyond grpc-go.
//
//	go test -run X -bench SubmitJob -benchmem -benchtime 50000x ./internal/workload/jobs
func BenchmarkSubmitJob(b *testing.B) {
	const parts = 8
	hub := NewHub(0)
	eng := enginetest.OpenEngine(b, b.TempDir(), engine.Options{Partitions: parts,
		Notify: func(_ int, wl uint8, v any) {
			if wl == WorkloadID {
				hub.Notify(v)
			}
		}}, &Workload{Partitions: parts, Limits: Limits{MaxJobsPerQueue: 1 << 30}})
	a := NewAPI(eng, hub)
	b.Cleanup(a.Shutdown)
	payload := []byte(`{"command":["echo","bench"]}`)
	ctx := context.Background()
	b.SetParallelism(100) // 200 callers on 2 cores, as the unary phase
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			// A fresh request each time, as grpc-go decodes one per call.
			req := &jqpb.SubmitJobRequest{QueueName: DefaultQueue, Payload: payload}
			if _, err := a.submitJob(ctx, req); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
