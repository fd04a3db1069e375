package jobs

import (
	"testing"

	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/engine/enginetest"
)

// harness runs the jobs machines of n partitions with the engine's test
// kit (enginetest.Harness); the model tests add their own helpers to it.
type harness struct {
	*enginetest.Harness[*Machine, *Result]
}

func newHarness(t testing.TB, seed uint64, n int, lim Limits) *harness {
	h := &harness{enginetest.NewHarness[*Machine, *Result](t, &Workload{Partitions: n, Limits: lim}, n, seed)}
	h.Poke = func(m *Machine) { pokeFork(m, h.Now) }
	return h
}

// pokeFork changes m (no longer used by the run) the ways that could
// leak into a fork sharing its memory: events appended past the cap,
// jobs leased, finished and purged.
func pokeFork(m *Machine, now int64) {
	fx := new(engine.Effects)
	apply := func(kind engine.InputKind, at int64, cmd engine.Command) {
		fx.Reset()
		m.Apply(&engine.Input{Kind: kind, TimeNs: at, Cmd: cmd}, fx)
	}
	for _, q := range m.queues {
		apply(engine.FromClient, now, &Lease{Queue: q.Name, Worker: "poke", Max: 1000, LeaseNs: 1})
	}
	for id, j := range m.allJobs() {
		apply(engine.FromClient, now, &Report{JobID: id, Worker: j.Worker, Success: true})
		apply(engine.FromClient, now, &Cancel{JobID: id})
	}
	apply(engine.FromTimer, now+1e18, &PurgeJobs{})
}
