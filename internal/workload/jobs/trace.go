package jobs

import "github.com/surge-run/surge/internal/engine"

// A job submitted in a sampled trace keeps the trace's context, in memory
// only, until it is purged: not logged, not in snapshots, never read by a
// rule, so replay and every answer are the same without it (a restart
// ends the traces of jobs not yet run). Each lease of it is then a
// "jobs.dispatch" step of that trace, whose context goes to the worker
// with the assignment; the worker runs the job under it and reports in
// it. The map exists only once a traced job came.

// keepTrace keeps the applying submission's trace for job id.
func (m *Machine) keepTrace(id string) {
	if !m.trace.Valid() {
		return
	}
	if m.traces == nil {
		m.traces = map[string]engine.TraceContext{}
	}
	m.traces[id] = m.trace
}

// traceDispatch makes the lease of job id a step of its trace, and adds
// the step's context to traces (made when first needed) for the
// assignment.
func (m *Machine) traceDispatch(traces map[string]engine.TraceContext, id string, fx *engine.Effects) map[string]engine.TraceContext {
	tc, ok := m.traces[id]
	if !ok {
		return traces
	}
	if traces == nil {
		traces = map[string]engine.TraceContext{}
	}
	traces[id] = fx.TraceStep("jobs.dispatch", tc)
	return traces
}
