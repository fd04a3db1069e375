package sequencer

import "github.com/surge-run/surge/internal/engine"

// A message published in a sampled trace keeps the trace's context until
// it is released, which may be many batches later (a gap before it
// closes): its release is then a step of that trace. The contexts are
// kept beside the group, in memory only: not logged, not in snapshots,
// never read by a rule, so replay and every answer are the same without
// them (a restart ends the traces of messages not yet released). The map
// exists only once a traced message came.

// keepTrace keeps the applying input's trace for seq, if it is traced.
func (m *Machine) keepTrace(g *Group, seq uint64) {
	if !m.trace.Valid() {
		return
	}
	if g.traces == nil {
		g.traces = map[uint64]engine.TraceContext{}
	}
	g.traces[seq] = m.trace
}

// traceRelease makes seq's release a step of its publisher's trace.
func (m *Machine) traceRelease(g *Group, seq uint64, fx *engine.Effects) {
	tc, ok := g.traces[seq]
	if !ok {
		return
	}
	delete(g.traces, seq)
	fx.TraceStep("sequencer.release", tc)
}
