package tracing

import (
	"context"
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/surge-run/surge/internal/engine"
)

// StepQueueLen bounds the engine's traced steps waiting for their spans
// (engine.StepTracer): a step that finds it full is dropped and counted
// in surge_trace_steps_dropped_total, so that a slow exporter never
// holds a partition's completions.
const StepQueueLen = 4096

// Step is engine.StepTracer's: it queues s for the span maker, never
// blocking.
func (t *Tracing) Step(s engine.StepTrace) {
	t.startSteps()
	t.stepsMu.RLock()
	defer t.stepsMu.RUnlock()
	if t.stepsClosed {
		t.dropped.Add(1)
		return
	}
	select {
	case t.steps <- s:
	default:
		t.dropped.Add(1)
	}
}

// startSteps starts the goroutine that turns queued steps into spans, at
// the first step: a server with tracing on but no saga, job or held
// message never starts it.
func (t *Tracing) startSteps() {
	t.stepsOnce.Do(func() {
		t.steps = make(chan engine.StepTrace, StepQueueLen)
		t.stepsDone = make(chan struct{})
		go t.makeSteps()
	})
}

func (t *Tracing) makeSteps() {
	defer close(t.stepsDone)
	for s := range t.steps {
		t.stepSpan(s)
	}
}

// stopSteps makes the spans of the steps queued so far and stops; a step
// that comes later is dropped.
func (t *Tracing) stopSteps() {
	t.stepsOnce.Do(func() {}) // none started: none will be
	t.stepsMu.Lock()
	stop := !t.stepsClosed && t.steps != nil
	t.stepsClosed = true
	if stop {
		close(t.steps)
	}
	t.stepsMu.Unlock()
	if stop {
		<-t.stepsDone
	}
}

// stepSpan makes s's span, with the id the engine gave it (so that what
// it caused, already carrying that id, is its child), as a child of the
// span it descends from, which another node may have made.
func (t *Tracing) stepSpan(s engine.StepTrace) {
	parent := trace.ContextWithRemoteSpanContext(context.Background(), spanContext(s.Parent))
	ctx := withSpanID(parent, s.Span.SpanID)
	attrs := []attribute.KeyValue{attribute.Int("surge.partition", s.Partition), attribute.Int("surge.workload", int(s.Workload))}
	name := s.Name
	if name == "" {
		name = stepName(s)
	} else {
		attrs = append(attrs, attribute.String("surge.step", s.Name))
	}
	if s.Command != nil {
		attrs = append(attrs, attribute.String("surge.command", commandName(s.Command)))
	}
	_, sp := t.tracer.Start(ctx, name, trace.WithTimestamp(timeOf(s.Started)), trace.WithAttributes(attrs...),
		trace.WithSpanKind(trace.SpanKindConsumer))
	sp.AddEvent("applied and appended to the log", trace.WithTimestamp(timeOf(s.Appended)))
	sp.End(trace.WithTimestamp(timeOf(s.Durable)))
}

// stepName names a message's or timer's span after its command.
func stepName(s engine.StepTrace) string {
	kind := "engine.message"
	if s.Kind == engine.FromTimer {
		kind = "engine.timer"
	}
	if s.Command == nil {
		return kind
	}
	return kind + " " + commandName(s.Command)
}

// commandName is the command's type without its package: few names.
func commandName(c engine.Command) string {
	n := fmt.Sprintf("%T", c)
	n = strings.TrimLeft(n, "*")
	if i := strings.LastIndexByte(n, '.'); i >= 0 {
		n = n[i+1:]
	}
	return n
}

// spanContext is tc as OpenTelemetry's remote span context.
func spanContext(tc engine.TraceContext) trace.SpanContext {
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tc.TraceID, SpanID: tc.SpanID,
		TraceFlags: trace.TraceFlags(tc.Flags), Remote: true})
}

// engineContext is sc as the engine carries it.
func engineContext(sc trace.SpanContext) engine.TraceContext {
	return engine.TraceContext{TraceID: sc.TraceID(), SpanID: sc.SpanID(), Flags: byte(sc.TraceFlags())}
}

// Collectors are tracing's metrics, for the server's registry.
func (t *Tracing) Collectors() []prometheus.Collector {
	return []prometheus.Collector{prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "surge_trace_steps_dropped_total",
		Help: "Traced steps (a saga's messages, timers, a job's dispatch, a held message's release) whose span was not made: the queue to the span maker (" + fmt.Sprint(StepQueueLen) + ") was full.",
	}, func() float64 { return float64(t.dropped.Load()) })}
}

// DroppedSteps is surge_trace_steps_dropped_total.
func (t *Tracing) DroppedSteps() uint64 { return t.dropped.Load() }
