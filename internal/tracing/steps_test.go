package tracing

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/surge-run/surge/internal/engine"
)

var parentTC = engine.TraceContext{TraceID: [16]byte{9, 8, 7}, SpanID: [8]byte{6, 5, 4}, Flags: 1}

// A step's span has the id the engine chose, its parent's trace and
// parent, its times, and a name from its command.
func TestStepSpanTakesTheEnginesID(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), IDGenerator())
	tr := New(tp)
	span := parentTC.Child()
	now := time.Now().UnixNano()
	tr.Step(engine.StepTrace{Kind: engine.FromMessage, Command: &struct{ engine.Command }{}, Partition: 3,
		Parent: parentTC, Span: span, Started: now, Appended: now + 10, Durable: now + 20})
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := exp.GetSpans()
	if len(got) != 1 {
		t.Fatalf("%d spans, want 1", len(got))
	}
	s := got[0]
	if s.SpanContext.SpanID() != trace.SpanID(span.SpanID) || s.SpanContext.TraceID() != trace.TraceID(parentTC.TraceID) ||
		s.Parent.SpanID() != trace.SpanID(parentTC.SpanID) || !s.Parent.IsRemote() {
		t.Errorf("span %s in %s, parent %s; want %x in %x, parent %x", s.SpanContext.SpanID(), s.SpanContext.TraceID(), s.Parent.SpanID(), span.SpanID, parentTC.TraceID, parentTC.SpanID)
	}
	if !strings.HasPrefix(s.Name, "engine.message ") {
		t.Errorf("name %q", s.Name)
	}
	if s.StartTime.UnixNano() != now || s.EndTime.UnixNano() != now+20 {
		t.Errorf("span %v–%v, want the batch's start to durable", s.StartTime, s.EndTime)
	}
}

// blockingExporter holds every export until released.
type blockingExporter struct {
	release chan struct{}
	once    sync.Once
	started chan struct{}
}

func (b *blockingExporter) ExportSpans(ctx context.Context, _ []sdktrace.ReadOnlySpan) error {
	b.once.Do(func() { close(b.started) })
	<-b.release
	return nil
}

func (b *blockingExporter) Shutdown(context.Context) error { return nil }

// Step never blocks: with the span maker stuck on a slow exporter, steps
// beyond the queue are dropped and counted.
func TestStepsDroppedWhenTheQueueIsFull(t *testing.T) {
	exp := &blockingExporter{release: make(chan struct{}), started: make(chan struct{})}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), IDGenerator())
	tr := New(tp)
	st := engine.StepTrace{Parent: parentTC, Span: parentTC.Child(), Started: 1, Appended: 2, Durable: 3}
	tr.Step(st)
	<-exp.started // the maker is now stuck on the first
	extra := 7
	for range StepQueueLen + extra {
		tr.Step(st)
	}
	if got := tr.DroppedSteps(); got != uint64(extra) {
		t.Errorf("%d steps dropped, want %d (the queue holds %d)", got, extra, StepQueueLen)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(tr.Collectors()...)
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 || mfs[0].GetName() != "surge_trace_steps_dropped_total" || mfs[0].Metric[0].GetCounter().GetValue() != float64(extra) {
		t.Errorf("metrics %v (%v), want surge_trace_steps_dropped_total %d", mfs, err, extra)
	}
	close(exp.release)
	tr.Shutdown(context.Background())
}

// A step after Shutdown is dropped, not sent on a closed queue.
func TestStepAfterShutdownIsDropped(t *testing.T) {
	tr := New(sdktrace.NewTracerProvider(IDGenerator()))
	st := engine.StepTrace{Parent: parentTC, Span: parentTC.Child(), Started: 1, Appended: 2, Durable: 3}
	tr.Step(st)
	tr.Shutdown(context.Background())
	tr.Step(st)
	if got := tr.DroppedSteps(); got != 1 {
		t.Errorf("%d dropped, want the one after Shutdown", got)
	}
}
