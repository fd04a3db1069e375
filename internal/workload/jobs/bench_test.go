package jobs

import (
	"fmt"
	"testing"

	"github.com/surge-run/surge/internal/engine"
)

// BenchmarkJobLifecycle applies what one job costs a partition: submit,
// lease, ack and report, with their encodings as the engine logs them.
func BenchmarkJobLifecycle(b *testing.B) {
	m := NewMachine(Options{OwnsDefault: true, Limits: Limits{MaxJobsPerQueue: 1 << 30}})
	fx := new(engine.Effects) // as the engine does: reset, not made, per apply
	payload := []byte(`{"command":["echo","bench"]}`)
	ids := make([]string, b.N)
	for i := range ids {
		ids[i] = fmt.Sprintf("%08x-0000-4000-8000-000000000000", i)
	}
	now := int64(1e18)
	apply := func(c engine.Command) {
		data, _ := c.AppendBinary(nil)
		cmd, err := Decode(data)
		if err != nil {
			b.Fatal(err)
		}
		now++
		fx.Reset()
		m.Apply(&engine.Input{Kind: engine.FromClient, TimeNs: now, Cmd: cmd}, fx)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		apply(&Submit{JobID: ids[i], Queue: DefaultQueue, Payload: payload, Priority: int32(i % 10), RetentionNs: 1})
		apply(&Lease{Queue: DefaultQueue, Worker: "w", Max: 1, LeaseNs: 30e9})
		apply(&Ack{JobID: ids[i], Worker: "w"})
		apply(&Report{JobID: ids[i], Worker: "w", Success: true})
		if i%1024 == 1023 {
			fx.Reset()
			m.Apply(&engine.Input{Kind: engine.FromTimer, TimeNs: now, Cmd: &PurgeJobs{}}, fx)
		}
	}
}
