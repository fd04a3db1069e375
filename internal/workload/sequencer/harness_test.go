package sequencer

import (
	"testing"

	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/engine/enginetest"
)

// harness runs the sequencer machines of n partitions with the engine's
// test kit (enginetest.Harness); the model tests add their own helpers.
type harness struct {
	*enginetest.Harness[*Machine, *Result]
}

func newHarness(t testing.TB, seed uint64, n int, lim Limits) *harness {
	h := &harness{enginetest.NewHarness[*Machine, *Result](t, &Workload{Limits: lim}, n, seed)}
	h.Poke = func(m *Machine) { pokeFork(m, h.Now) }
	return h
}

// pokeFork changes m (no longer used by the run) the ways that could
// leak into a fork sharing its memory: messages leased, completed,
// released, purged, published into the window, consumers committed and
// groups deleted.
func pokeFork(m *Machine, now int64) {
	fx := new(engine.Effects)
	apply := func(kind engine.InputKind, at int64, c engine.Command) *Result {
		fx.Reset()
		m.Apply(&engine.Input{Kind: kind, TimeNs: at, Cmd: c}, fx)
		return fx.Replied().(*Result)
	}
	names := make([]string, 0, len(m.groups))
	for n := range m.groups {
		names = append(names, n)
	}
	for _, n := range names {
		g := m.groups[n]
		seq := uint64(0)
		if g.Mode == ModeClient {
			seq = g.last() + 1
		}
		apply(engine.FromClient, now, &Publish{Group: n, MsgID: "poke", Seq: seq, Payload: []byte("poke")})
		apply(engine.FromClient, now, &Extend{Group: n, Processor: "p1", LeaseNs: 1e12})
		apply(engine.FromClient, now, &Release{Group: n, Processor: "p2"})
		for seq := g.base; seq <= g.last(); seq++ {
			apply(engine.FromTimer, now+1e12, &LeaseExpired{Group: n, Seq: seq})
		}
		r := apply(engine.FromClient, now, &Lease{Group: n, Processor: "poke", Max: MaxLeaseBatch, LeaseNs: 1})
		// Half the leased messages one by one, the rest in one batch
		// (from the highest: the run goes out at its end).
		var batch []uint64
		for i, x := range r.Messages {
			if i%2 == 0 {
				apply(engine.FromClient, now, &Complete{Group: n, Seq: x.Seq, Processor: "poke"})
			} else {
				batch = append([]uint64{x.Seq}, batch...)
			}
		}
		if len(batch) > 0 {
			apply(engine.FromClient, now, &CompleteBatch{Group: n, Processor: "poke", Seqs: batch})
		}
		apply(engine.FromClient, now, &Commit{Group: n, Consumer: "poke", Position: g.position})
	}
	apply(engine.FromTimer, now+1e18, &PurgeMessages{})
	for _, n := range names {
		apply(engine.FromClient, now, &DeleteGroup{Group: n})
	}
}
