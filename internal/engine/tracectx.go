package engine

import (
	"context"
	"encoding/hex"
	"math/rand/v2"
	"time"
)

// TraceContext is a sampled W3C trace context (trace id, span id, flags):
// what a message, a timer or a workload's held item carries so that the
// steps it causes later, in other batches, partitions or nodes, join the
// trace that caused them. The zero value is "not traced". The engine never
// logs it or puts it in a snapshot: it lives in memory beside what it
// traces, so replay is the same with or without it, and a restart ends the
// traces of work in flight (their later steps are then untraced).
type TraceContext struct {
	TraceID [16]byte
	SpanID  [8]byte
	Flags   byte
}

// TraceContextBytes is the size of a TraceContext on the wire: version,
// trace id, span id, flags (the binary form of a traceparent).
const TraceContextBytes = 1 + 16 + 8 + 1

// Valid reports whether tc names a trace.
func (tc TraceContext) Valid() bool { return tc.TraceID != [16]byte{} && tc.SpanID != [8]byte{} }

// Child is a context in tc's trace for a new step whose span id is made
// now (the span itself is made later, outside the partition's loop, with
// this id; see StepTracer).
func (tc TraceContext) Child() TraceContext {
	c := tc
	for c.SpanID == [8]byte{} || c.SpanID == tc.SpanID {
		v := rand.Uint64()
		for i := range c.SpanID {
			c.SpanID[i] = byte(v >> (8 * i))
		}
	}
	return c
}

// AppendBinary appends tc's TraceContextBytes.
func (tc TraceContext) AppendBinary(dst []byte) ([]byte, error) {
	dst = append(dst, 0)
	dst = append(dst, tc.TraceID[:]...)
	dst = append(dst, tc.SpanID[:]...)
	return append(dst, tc.Flags), nil
}

// ParseTraceContext reads what AppendBinary wrote (false: not a version 0
// context, or too short).
func ParseTraceContext(b []byte) (TraceContext, bool) {
	var tc TraceContext
	if len(b) < TraceContextBytes || b[0] != 0 {
		return tc, false
	}
	copy(tc.TraceID[:], b[1:17])
	copy(tc.SpanID[:], b[17:25])
	tc.Flags = b[25]
	return tc, tc.Valid()
}

// Traceparent is tc as a W3C traceparent header value ("" if not valid).
func (tc TraceContext) Traceparent() string {
	if !tc.Valid() {
		return ""
	}
	return "00-" + hex.EncodeToString(tc.TraceID[:]) + "-" + hex.EncodeToString(tc.SpanID[:]) + "-" + hex.EncodeToString([]byte{tc.Flags})
}

// ParseTraceparent reads a W3C traceparent header value.
func ParseTraceparent(s string) (TraceContext, bool) {
	var tc TraceContext
	if len(s) != 55 || s[:3] != "00-" || s[35] != '-' || s[52] != '-' {
		return tc, false
	}
	var f [1]byte
	if _, err := hex.Decode(tc.TraceID[:], []byte(s[3:35])); err != nil {
		return tc, false
	}
	if _, err := hex.Decode(tc.SpanID[:], []byte(s[36:52])); err != nil {
		return tc, false
	}
	if _, err := hex.Decode(f[:], []byte(s[53:])); err != nil {
		return tc, false
	}
	tc.Flags = f[0]
	return tc, tc.Valid()
}

// WithTraceContext marks ctx as traced (like WithTrace) and names the span
// that the engine's steps for its request descend from: the messages and
// timers its command makes carry tc.
func WithTraceContext(ctx context.Context, tc TraceContext) context.Context {
	return context.WithValue(ctx, traceKey{}, tc)
}

// TraceContextOf is the context WithTraceContext put in ctx.
func TraceContextOf(ctx context.Context) (TraceContext, bool) {
	tc, ok := ctx.Value(traceKey{}).(TraceContext)
	return tc, ok && tc.Valid()
}

// StepTracer is optionally implemented by a Tracer: it is told of the
// traced steps that no client waits for, once they are durable: a message
// or timer applied in the trace of the command that sent or set it, and a
// step a workload declared with Effects.TraceStep. Step is called on the
// log's completion goroutine, so it must not block: an implementation
// queues the step (bounded; dropping, and counting, when full) and makes
// its span elsewhere.
type StepTracer interface {
	Step(s StepTrace)
}

// StepTrace is one traced step, as wall-clock Unix nanoseconds.
type StepTrace struct {
	// Name is the workload's name for a declared step, "" for a message
	// or timer (the tracer names it after Kind and Command).
	Name      string
	Kind      InputKind // what was applied (FromMessage, FromTimer) or during what
	Workload  uint8
	Command   Command // the command applied (for the span's name)
	Partition int
	Parent    TraceContext // the span it descends from
	Span      TraceContext // its own span: Parent's trace, the span id to use
	Started   int64        // the batch started (a declared step: when it was applied)
	Appended  int64
	Durable   int64
}

// traceInput gives a message or timer that carries parent its own step in
// parent's trace, recorded in b; it returns the context its apply runs in
// (zero when parent is not traced).
func (p *partition) traceInput(b *batch, parent *TraceContext, kind InputKind, wl uint8, cmd Command) TraceContext {
	if parent == nil || b == nil {
		return TraceContext{}
	}
	span := parent.Child()
	b.steps = append(b.steps, StepTrace{Kind: kind, Workload: wl, Command: cmd, Partition: p.id,
		Parent: *parent, Span: span, Started: b.startedNano})
	return span
}

// stepsApplied records the steps the last apply declared.
func (p *partition) stepsApplied(b *batch, wl uint8, in *Input) {
	if len(p.fx.steps) == 0 {
		return
	}
	if b != nil {
		now := time.Now().UnixNano()
		for _, s := range p.fx.steps {
			s.Workload, s.Kind, s.Partition, s.Started = wl, in.Kind, p.id, now
			b.steps = append(b.steps, s)
		}
	}
	clear(p.fx.steps)
	p.fx.steps = p.fx.steps[:0]
}

// stepsAppended and stepsDurable stamp b's steps; the second hands them to
// the tracer.
func (b *batch) stepsAppended() {
	if len(b.steps) == 0 {
		return
	}
	now := time.Now().UnixNano()
	for i := range b.steps {
		b.steps[i].Appended = now
	}
}

func (b *batch) stepsDurable(ok bool) {
	if len(b.steps) == 0 {
		return
	}
	if st, isStep := b.p.e.opts.Tracer.(StepTracer); isStep && ok {
		now := time.Now().UnixNano()
		for _, s := range b.steps {
			s.Durable = now
			st.Step(s)
		}
	}
	clear(b.steps)
	b.steps = b.steps[:0]
}

// TraceStep declares a step of this apply in the trace of parent (a
// context the workload kept with what it holds: a job, a held message),
// and returns the step's own context, for what it hands on (a job's
// assignment). With parent not traced it does nothing and returns it.
// Steps are not logged; replay ignores them.
func (fx *Effects) TraceStep(name string, parent TraceContext) TraceContext {
	if !parent.Valid() {
		return parent
	}
	span := parent.Child()
	fx.steps = append(fx.steps, StepTrace{Name: name, Parent: parent, Span: span})
	return span
}

// timerParent is the trace a timer set by in carries: in's, unless in is
// itself a timer: a periodic timer that sets itself again (a retention
// purge) would otherwise keep one trace going for ever.
func timerParent(in *Input) TraceContext {
	if in.Kind == FromTimer {
		return TraceContext{}
	}
	return in.Trace
}

// setTimerTrace keeps (or forgets) the trace of the timer (wl, id); with
// tracing off the map is never made.
func (p *partition) setTimerTrace(wl uint8, id string, tc TraceContext) {
	k := timerKey{wl, id}
	if !tc.Valid() {
		if p.timerTraces != nil {
			delete(p.timerTraces, k)
		}
		return
	}
	if p.timerTraces == nil {
		p.timerTraces = make(map[timerKey]TraceContext)
	}
	p.timerTraces[k] = tc
}

// timerTrace takes the trace of the timer (wl, id) as it fires.
func (p *partition) timerTrace(wl uint8, id string) *TraceContext {
	tc, ok := p.timerTraces[timerKey{wl, id}]
	if !ok {
		return nil
	}
	delete(p.timerTraces, timerKey{wl, id})
	return &tc
}
