package engine_test

import (
	"bytes"
	"context"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/surge-run/surge/internal/cmdlog"
	"github.com/surge-run/surge/internal/engine"
)

// stepTracer also keeps the steps it is told of.
type stepTracer struct {
	recordingTracer
	smu   sync.Mutex
	steps []engine.StepTrace
}

func (s *stepTracer) Step(st engine.StepTrace) {
	s.smu.Lock()
	s.steps = append(s.steps, st)
	s.smu.Unlock()
}

// waitSteps waits (up to 30 s) for n steps.
func (s *stepTracer) waitSteps(t *testing.T, n int) []engine.StepTrace {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		s.smu.Lock()
		got := append([]engine.StepTrace(nil), s.steps...)
		s.smu.Unlock()
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d steps reported, want %d: %+v", len(got), n, got)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

var clientTC = engine.TraceContext{TraceID: [16]byte{1, 2, 3}, SpanID: [8]byte{4, 5, 6}, Flags: 1}

// A message sent by a traced command is applied in its own step of the
// same trace, a child of the sender's span, timed in order; a timer set
// by a traced command fires in such a step too. Untraced ones report
// nothing.
func TestMessagesAndTimersCarryTheTrace(t *testing.T) {
	st := &stepTracer{}
	e := openEngineWith(t, t.TempDir(), func(o *engine.Options) { o.Tracer = st })
	defer e.Close()
	mustDo(t, e, e.PartitionOf("a"), &transfer{From: "a", To: "b", N: 1, ID: 1})
	ctx := engine.WithTraceContext(context.Background(), clientTC)
	if _, err := e.Do(ctx, e.PartitionOf("a"), 7, &transfer{From: "a", To: "b", N: 1, ID: 2}); err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(20 * time.Millisecond).UnixNano()
	if _, err := e.Do(ctx, e.PartitionOf("x"), 7, &alarm{ID: "x", AtNs: at}); err != nil {
		t.Fatal(err)
	}
	steps := st.waitSteps(t, 2)
	time.Sleep(50 * time.Millisecond)
	if got := st.waitSteps(t, 2); len(got) != 2 {
		t.Fatalf("%d steps, want the credit's and the ring's: %+v", len(got), got)
	}
	kinds := map[engine.InputKind]engine.StepTrace{}
	for _, s := range steps {
		kinds[s.Kind] = s
		if s.Parent != clientTC || s.Span.TraceID != clientTC.TraceID || s.Span.SpanID == clientTC.SpanID || !s.Span.Valid() {
			t.Errorf("step %+v: want a new span in the client's trace, its child", s)
		}
		if s.Started == 0 || s.Appended < s.Started || s.Durable < s.Appended {
			t.Errorf("step times out of order: %+v", s)
		}
	}
	if c, ok := kinds[engine.FromMessage].Command.(*credit); !ok || c.ID != 2 || kinds[engine.FromMessage].Partition != e.PartitionOf("b") {
		t.Errorf("message step %+v, want the credit of transfer 2 in b's partition", kinds[engine.FromMessage])
	}
	if _, ok := kinds[engine.FromTimer].Command.(*ring); !ok {
		t.Errorf("timer step %+v, want the ring", kinds[engine.FromTimer])
	}
}

// A TraceContext survives its binary and traceparent forms, and a child
// stays in its trace with a new span id.
func TestTraceContextRoundTrips(t *testing.T) {
	b, _ := clientTC.AppendBinary(nil)
	if len(b) != engine.TraceContextBytes {
		t.Fatalf("%d bytes, want %d", len(b), engine.TraceContextBytes)
	}
	if got, ok := engine.ParseTraceContext(b); !ok || got != clientTC {
		t.Errorf("parsed %+v %v, want %+v", got, ok, clientTC)
	}
	if got, ok := engine.ParseTraceparent(clientTC.Traceparent()); !ok || got != clientTC {
		t.Errorf("traceparent %q parsed to %+v %v", clientTC.Traceparent(), got, ok)
	}
	if c := clientTC.Child(); c.TraceID != clientTC.TraceID || c.SpanID == clientTC.SpanID || !c.Valid() {
		t.Errorf("child %+v of %+v", c, clientTC)
	}
}

// recLog keeps a copy of every entry appended, per partition.
type recLog struct {
	cmdlog.Log
	mu  sync.Mutex
	got map[uint32][][]byte
}

func (l *recLog) Append(es []cmdlog.Entry, done cmdlog.DoneFunc) {
	l.mu.Lock()
	for _, e := range es {
		l.got[e.Partition] = append(l.got[e.Partition], bytes.Clone(e.Data))
	}
	l.mu.Unlock()
	l.Log.Append(es, done)
}

// Trace contexts never reach the log: the same commands, traced (with a
// tracer) or not (no tracer), log the same records byte for byte, so
// replay is the same; and the traced log replays to the same state.
func TestTracedLogIsTheUntracedLog(t *testing.T) {
	run := func(dir string, traced bool) (*recLog, []int64) {
		rl := &recLog{got: map[uint32][][]byte{}}
		st := &stepTracer{}
		e := openEngineWith(t, dir, func(o *engine.Options) {
			engine.SetClock(o, func() int64 { return 1e18 })
			rl.Log = openWAL(t, dir, o.Partitions)
			o.Log = rl
			if traced {
				o.Tracer = st
			}
		})
		ctx := context.Background()
		if traced {
			ctx = engine.WithTraceContext(ctx, clientTC)
		}
		for _, c := range []engine.Command{&transfer{From: "a", To: "b", N: 3, ID: 1}, &alarm{ID: "c", AtNs: 1}} {
			if _, err := e.Do(ctx, e.PartitionOf("a"), 7, c); err != nil {
				t.Fatal(err)
			}
		}
		waitFired(t, e, e.PartitionOf("a"), "c", 1)
		d, c, _ := totals(t, e)
		for d != c {
			time.Sleep(time.Millisecond)
			d, c, _ = totals(t, e)
		}
		if traced {
			st.waitSteps(t, 2)
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		return rl, []int64{d, c}
	}
	dir := t.TempDir()
	traced, tState := run(dir, true)
	plain, pState := run(t.TempDir(), false)
	if len(traced.got) == 0 || !reflect.DeepEqual(traced.got, plain.got) {
		t.Fatalf("traced log %x\nuntraced log %x", traced.got, plain.got)
	}
	e := openEngineWith(t, dir, nil)
	defer e.Close()
	if d, c, _ := totals(t, e); !reflect.DeepEqual([]int64{d, c}, tState) || !reflect.DeepEqual(tState, pState) {
		t.Errorf("replayed traced log: debits, credits %d %d; before %v; untraced %v", d, c, tState, pState)
	}
}

// With tracing off, a command that sends a message and sets a timer
// allocates no more than with a step tracer whose requests are not
// sampled: carrying contexts costs an untraced command nothing.
func TestUntracedStepsAllocateNothing(t *testing.T) {
	count := func(tr engine.Tracer) float64 {
		e := openEngineWith(t, t.TempDir(), func(o *engine.Options) { o.Tracer = tr })
		defer e.Close()
		ctx := context.Background()
		p := e.PartitionOf("a")
		mustDo(t, e, p, &transfer{From: "a", To: "b", N: 1})
		return testing.AllocsPerRun(300, func() {
			if _, err := e.Do(ctx, p, 7, &transfer{From: "a", To: "b", N: 1}); err != nil {
				t.Fatal(err)
			}
			if _, err := e.Do(ctx, p, 7, &alarm{ID: "z", AtNs: 1 << 62}); err != nil {
				t.Fatal(err)
			}
		})
	}
	off, unsampled := count(nil), count(&stepTracer{})
	if off > unsampled+1 {
		t.Errorf("a command allocates %v times with tracing off, %v with a tracer sampling nothing", off, unsampled)
	}
	t.Logf("allocations per transfer and alarm: off %v, on but not sampled %v", off, unsampled)
}

// A timer's context goes when the timer goes: cancelled (even by a traced
// command) or fired, none is left behind.
func TestTimerTracesDoNotLinger(t *testing.T) {
	e := openEngineWith(t, t.TempDir(), func(o *engine.Options) { o.Tracer = &stepTracer{} })
	defer e.Close()
	ctx := engine.WithTraceContext(context.Background(), clientTC)
	p := e.PartitionOf("a")
	for _, c := range []engine.Command{&alarm{ID: "x", AtNs: 1 << 62}, &alarm{ID: "y", AtNs: 1 << 62}} {
		if _, err := e.Do(ctx, p, 7, c); err != nil {
			t.Fatal(err)
		}
	}
	if n := engine.TimerTraces(e, p); n != 2 {
		t.Fatalf("%d timers keep a trace, want the 2 set", n)
	}
	if _, err := e.Do(ctx, p, 7, &cancelAlarm{ID: "x"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Do(context.Background(), p, 7, &alarm{ID: "y", AtNs: 1}); err != nil {
		t.Fatal(err)
	}
	waitFired(t, e, p, "y", 1)
	if n := engine.TimerTraces(e, p); n != 0 {
		t.Errorf("%d timers keep a trace after one was cancelled and the other set again untraced and fired", n)
	}
}
