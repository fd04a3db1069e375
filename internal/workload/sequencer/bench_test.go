package sequencer

import (
	"fmt"
	"testing"

	"github.com/surge-run/surge/internal/engine"
)

// BenchmarkMessageLifecycle applies what one message costs a partition:
// publish, lease, complete (which releases it), with their encodings as
// the engine logs them; a consumer commits every 1,024 messages, which
// purges what it passed.
func BenchmarkMessageLifecycle(b *testing.B) {
	m := NewMachine(Options{})
	fx := new(engine.Effects) // as the engine does: reset, not made, per apply
	var buf []byte            // the engine's batch buffer, reused
	payload := []byte(`{"processingTime":0}`)
	ids := make([]string, b.N)
	for i := range ids {
		ids[i] = fmt.Sprintf("%08x-0000-4000-8000-000000000000", i)
	}
	now := int64(1e18)
	var res *Result
	apply := func(c engine.Command) {
		data, _ := c.AppendBinary(buf[:0])
		buf = data
		cmd, err := Decode(data)
		if err != nil {
			b.Fatal(err)
		}
		now++
		fx.Reset()
		m.Apply(&engine.Input{Kind: engine.FromClient, TimeNs: now, Cmd: cmd}, fx)
		res = fx.Replied().(*Result)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		apply(&Publish{Group: "g", MsgID: ids[i], Payload: payload})
		apply(&Lease{Group: "g", Processor: "p", Max: 1, LeaseNs: 30e9})
		apply(&Complete{Group: "g", Seq: res.Messages[0].Seq, Processor: "p"})
		if res.Position != uint64(i+1) {
			b.Fatalf("position %d after %d messages", res.Position, i+1)
		}
		if i%1024 == 1023 {
			apply(&Commit{Group: "g", Consumer: "c", Position: res.Position})
		}
	}
}

// BenchmarkLeaseBatch applies what the benchmark processors cost a
// partition per leased batch of 100: a publish batch, a lease of 100 and
// their completions, either one Complete per message (each its own
// command, record and Released note: the path before CompleteBatch) or
// one CompleteBatch; a consumer commits after each batch. ns/msg is the
// figure to compare.
func BenchmarkLeaseBatch(b *testing.B) {
	const n = 100
	for _, batched := range []bool{false, true} {
		name := map[bool]string{false: "complete-each", true: "complete-batch"}[batched]
		b.Run(name, func(b *testing.B) {
			m := NewMachine(Options{})
			fx := new(engine.Effects)
			var buf []byte
			payload := []byte(`{"processingTime":0}`)
			now := int64(1e18)
			var res *Result
			apply := func(c engine.Command) {
				data, _ := c.AppendBinary(buf[:0])
				buf = data
				cmd, err := Decode(data)
				if err != nil {
					b.Fatal(err)
				}
				now++
				fx.Reset()
				m.Apply(&engine.Input{Kind: engine.FromClient, TimeNs: now, Cmd: cmd}, fx)
				res = fx.Replied().(*Result)
			}
			pub := &PublishBatch{Msgs: make([]Publish, n)}
			seqs := make([]uint64, n)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				for k := range pub.Msgs {
					pub.Msgs[k] = Publish{Group: "g", MsgID: fmt.Sprintf("%08x-0000-4000-8000-000000000000", i*n+k), Payload: payload}
				}
				apply(pub)
				apply(&Lease{Group: "g", Processor: "p", Max: n, LeaseNs: 30e9})
				for k, x := range res.Messages {
					seqs[k] = x.Seq
				}
				if batched {
					apply(&CompleteBatch{Group: "g", Processor: "p", Seqs: seqs})
				} else {
					for _, seq := range seqs {
						apply(&Complete{Group: "g", Seq: seq, Processor: "p"})
					}
				}
				if res.Position != uint64((i+1)*n) {
					b.Fatalf("position %d after %d batches", res.Position, i+1)
				}
				apply(&Commit{Group: "g", Consumer: "c", Position: res.Position})
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/msg")
		})
	}
}

// BenchmarkForkSnapshot measures how long a partition holding 100,000
// unreleased messages stops for a snapshot (the fork copies the window).
func BenchmarkForkSnapshot(b *testing.B) {
	m := NewMachine(Options{})
	fx := new(engine.Effects)
	payload := []byte(`{"processingTime":0}`)
	for i := 0; i < 100_000; i += MaxBatch {
		batch := &PublishBatch{}
		for k := range MaxBatch {
			batch.Msgs = append(batch.Msgs, Publish{Group: "g", MsgID: fmt.Sprintf("%08x-0000-4000-8000-000000000000", i+k), Payload: payload})
		}
		fx.Reset()
		m.Apply(&engine.Input{Kind: engine.FromClient, TimeNs: 1, Cmd: batch}, fx)
	}
	b.ResetTimer()
	for range b.N {
		m.ForkSnapshot()
	}
}
