package engine_test

import (
	"context"
	"sync"
	"testing"

	"github.com/surge-run/surge/internal/engine"
)

// recordingTracer traces the requests whose context says so, and keeps
// what it is told.
type recordingTracer struct {
	mu   sync.Mutex
	seen []engine.RequestTrace
}

func (r *recordingTracer) Finished(_ context.Context, t engine.RequestTrace) {
	r.mu.Lock()
	r.seen = append(r.seen, t)
	r.mu.Unlock()
}

func (r *recordingTracer) traces() []engine.RequestTrace {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]engine.RequestTrace(nil), r.seen...)
}

// A traced command is reported once, after its reply, with its steps in
// order and its batch's size; an untraced one is not reported.
func TestTracerSeesTracedRequestsOnly(t *testing.T) {
	rt := &recordingTracer{}
	e := openEngineWith(t, t.TempDir(), func(o *engine.Options) { o.Tracer = rt })
	defer e.Close()
	mustDo(t, e, e.PartitionOf("a"), &transfer{From: "a", To: "b", N: 1, ID: 1})
	if got := rt.traces(); len(got) != 0 {
		t.Fatalf("an untraced command was reported: %+v", got)
	}
	ctx := engine.WithTrace(context.Background())
	p := e.PartitionOf("a")
	if _, err := e.Do(ctx, p, 7, &transfer{From: "a", To: "b", N: 1, ID: 2}); err != nil {
		t.Fatal(err)
	}
	got := rt.traces()
	if len(got) != 1 {
		t.Fatalf("reported %d times, want once: %+v", len(got), got)
	}
	tr := got[0]
	b := tr.Batch
	if b == nil || tr.Partition != p || !tr.Command || tr.Err != nil {
		t.Fatalf("trace %+v, want a command of partition %d in a batch", tr, p)
	}
	steps := []int64{tr.Enqueued, b.Started, b.Appended, b.Durable, tr.Replied}
	for i := 1; i < len(steps); i++ {
		if steps[0] == 0 || steps[i] < steps[i-1] {
			t.Fatalf("steps enqueued, started, appended, durable, replied out of order: %v", steps)
		}
	}
	if b.Inputs < 1 || b.Records < 1 || b.Bytes < 1 {
		t.Errorf("batch %+v: want at least the one command", b)
	}
}

// With tracing off (no Tracer, the default) a request allocates no more
// than with a tracer that samples nothing: what tracing adds to the
// engine's path is a nil check. Queries, so that no log write's
// allocations blur the count.
func TestTracingOffAllocatesNothing(t *testing.T) {
	count := func(tr engine.Tracer) float64 {
		e := openEngineWith(t, t.TempDir(), func(o *engine.Options) { o.Tracer = tr })
		defer e.Close()
		ctx := context.Background()
		p := e.PartitionOf("a")
		mustDo(t, e, p, &transfer{From: "a", To: "b", N: 1, ID: 1})
		return testing.AllocsPerRun(200, func() {
			if _, err := e.Query(ctx, p, 7, getAccount{Key: "a"}); err != nil {
				t.Fatal(err)
			}
		})
	}
	off, unsampled := count(nil), count(&recordingTracer{})
	if off > unsampled {
		t.Errorf("a query allocates %v times with tracing off, %v with a tracer sampling nothing", off, unsampled)
	}
	t.Logf("allocations per query: off %v, on but not sampled %v", off, unsampled)
}
