package jobs

import (
	"fmt"
	"testing"

	"github.com/surge-run/surge/internal/engine"
)

func BenchmarkZZFirstFork(b *testing.B) {
	const pending = 12_500
	payload := []byte(`{"command":["echo","bench"]}`)
	b.ReportAllocs()
	for range b.N / pending {
		b.StopTimer()
		m := NewMachine(Options{OwnsDefault: true, Limits: Limits{MaxJobsPerQueue: 1 << 30}})
		fx := new(engine.Effects)
		for i := range pending {
			fx.Reset()
			m.Apply(&engine.Input{Kind: engine.FromClient, TimeNs: int64(1e18) + int64(i), Cmd: &Submit{
				JobID: fmt.Sprintf("%08x-0000-4000-8000-000000000000", i), Queue: DefaultQueue, Payload: payload}}, fx)
		}
		b.StartTimer()
		_ = m.ForkSnapshot()
	}
}
