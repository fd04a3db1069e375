package ticketing_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/workload/ticketing"
)

// BenchmarkEngineReserve measures the engine path without HTTP: a RANDOM
// reservation submitted to its area's partition, applied, written to the
// real log (group commit with fsync) and answered, from many goroutines.
// Areas are large so most reservations succeed and are recorded.
func BenchmarkEngineReserve(b *testing.B) {
	eng := newEngine(b, 8)
	ctx := context.Background()
	const areas = 16
	for a := range areas {
		area := ticketing.AreaDef{AreaID: fmt.Sprint(a), RowCount: 1000, ColCount: 100}
		p := engine.PartitionOfHash(engine.HashMore(engine.HashMore(engine.Hash("ev"), "\x00"), area.AreaID), eng.Partitions())
		if _, err := eng.Do(ctx, p, ticketing.WorkloadID, &ticketing.CreateArea{EventID: "ev", Area: area}); err != nil {
			b.Fatal(err)
		}
	}
	var n atomic.Uint64
	b.SetParallelism(128) // many requests in flight, as under HTTP load
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			area := fmt.Sprint(i % areas)
			p := engine.PartitionOfHash(engine.HashMore(engine.HashMore(engine.Hash("ev"), "\x00"), area), eng.Partitions())
			cmd := &ticketing.Reserve{UserID: "u", EventID: "ev", AreaID: area, Type: ticketing.TypeRandom, NumOfSeats: 1}
			cmd.ID[0], cmd.ID[1], cmd.ID[2], cmd.ID[3] = byte(i), byte(i>>8), byte(i>>16), byte(i>>24)
			if _, err := eng.Do(ctx, p, ticketing.WorkloadID, cmd); err != nil {
				b.Fatal(err)
			}
		}
	})
}
