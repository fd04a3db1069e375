package enginetest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"runtime"
	"strings"
	"testing"

	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/engine/enginetest"
)

// tally is the smallest workload with every effect: counters by key. An
// add may pass its amount on to another key (a message) or add it again
// later (a timer). Its flaws are switched on by the tests that need a
// wrong machine.
type tally struct{ flaw string }

const tallyID = 42

func (tally) ID() uint8                       { return tallyID }
func (tally) Name() string                    { return "tally" }
func (w tally) NewMachine(int) engine.Machine { return &counts{n: map[string]int64{}, flaw: w.flaw} }

type op struct {
	Kind  string // add, noop, ...: see Apply
	Key   string
	N     int64
	To    string // add: pass N on to this key too
	After int64  // add: add N again this much later
}

func (o *op) AppendBinary(b []byte) ([]byte, error) {
	js, err := json.Marshal(o)
	return append(b, js...), err
}

// applies counts adds of machines with the "global" flaw.
var applies int64

type counts struct {
	n    map[string]int64
	flaw string
}

func (c *counts) Apply(in *engine.Input, fx *engine.Effects) {
	o := in.Cmd.(*op)
	switch o.Kind {
	case "add":
		c.n[o.Key] += o.N
		if c.flaw == "global" { // depends on more than its inputs
			applies++
			c.n[o.Key] += applies
		}
		if o.To != "" {
			fx.Send(o.To, tallyID, &op{Kind: "add", Key: o.To, N: o.N})
		}
		if o.After > 0 {
			fx.SetTimer("later:"+o.Key, in.TimeNs+o.After, &op{Kind: "add", Key: o.Key, N: o.N})
		}
	case "cancel":
		fx.CancelTimer("later:" + o.Key)
	case "noop":
		fx.Unchanged()
	case "unchanged-send": // a workload bug the harness reports
		fx.Unchanged()
		fx.Send(o.Key, tallyID, &op{Kind: "noop"})
	case "send-elsewhere":
		fx.Send(o.Key, tallyID+1, &op{Kind: "noop"})
	case "reply-string":
		fx.Reply("not an int64")
		return
	}
	fx.Reply(c.n[o.Key])
}

func (c *counts) Query(q any) any { return c.n[q.(string)] }

func (c *counts) Decode(data []byte) (engine.Command, error) {
	o := new(op)
	return o, json.Unmarshal(data, o)
}

func (c *counts) AppendSnapshot(dst []byte) []byte {
	js, _ := json.Marshal(c.n)
	return append(dst, js...)
}

func (c *counts) ForkSnapshot() func([]byte) []byte {
	if c.flaw == "share" { // encodes the live map later: a broken fork
		return c.AppendSnapshot
	}
	frozen := &counts{n: maps.Clone(c.n), flaw: c.flaw}
	return frozen.AppendSnapshot
}

func (c *counts) Restore(data []byte) error {
	c.n = map[string]int64{}
	err := json.Unmarshal(data, &c.n)
	if c.flaw == "restore" { // loses what keys starting with x hold
		maps.DeleteFunc(c.n, func(k string, _ int64) bool { return strings.HasPrefix(k, "x") })
	}
	return err
}

type harness = enginetest.Harness[*counts, int64]

func newHarness(t testing.TB, w tally, n int) *harness {
	return enginetest.NewHarness[*counts, int64](t, w, n, 1)
}

// The harness routes, queues, times and logs as the engine does.
func TestHarnessRunsLikeTheEngine(t *testing.T) {
	h := newHarness(t, tally{}, 4)
	var seen []string
	h.OnApply = func(p int, cmd engine.Command, res int64, _ []any) {
		o := cmd.(*op)
		if p != h.Part(o.Key) {
			t.Errorf("%s applied in partition %d, its key's is %d", o.Key, p, h.Part(o.Key))
		}
		seen = append(seen, fmt.Sprintf("%s=%d", o.Key, res))
	}
	if r := h.Client("a", &op{Kind: "add", Key: "a", N: 1, To: "b", After: 10}); r != 1 {
		t.Fatalf("reply %d", r)
	}
	h.Client("a", &op{Kind: "add", Key: "a", N: 2, To: "b"})
	h.Client("a", &op{Kind: "noop", Key: "a"})
	pa, pb := h.Part("a"), h.Part("b")
	if len(h.Log[pa]) != 2 || h.Log[pa][1].Kind != engine.FromClient || h.Log[pa][1].At != enginetest.Start {
		t.Fatalf("partition %d logged %d inputs, want the two adds (not the noop)", pa, len(h.Log[pa]))
	}
	if q := h.Queues[[2]int{pa, pb}]; len(q) != 2 || q[0].Key != "b" {
		t.Fatalf("queued %+v", q)
	}
	if tm, ok := h.Timers[pa]["later:a"]; !ok || tm.At != enginetest.Start+10 {
		t.Fatalf("timers %v", h.Timers[pa])
	}
	// Messages of one pair arrive in the order sent.
	for h.Deliver() {
	}
	h.Advance(9)
	if got := h.Machines[pa].Query("a"); got != int64(3) {
		t.Fatalf("a = %v before its timer", got)
	}
	h.Advance(1)
	want := "a=1 a=3 a=3 b=1 b=3 a=4"
	if got := strings.Join(seen, " "); got != want {
		t.Fatalf("applied %s, want %s", got, want)
	}
	if k := h.Log[pa][len(h.Log[pa])-1]; k.Kind != engine.FromTimer || k.TimerID != "later:a" || k.At != enginetest.Start+10 {
		t.Fatalf("the firing was logged as %+v", k)
	}
	h.Client("x", &op{Kind: "add", Key: "x", N: 1, After: 5})
	h.Client("x", &op{Kind: "cancel", Key: "x"})
	h.Client("y", &op{Kind: "add", Key: "y", N: 1, After: 5, To: "z"})
	h.Drain()
	if h.TimersLeft() != 0 || h.Machines[h.Part("y")].Query("y") != int64(2) || h.Machines[h.Part("x")].Query("x") != int64(1) {
		t.Fatalf("after Drain: %d timers, y=%v, x=%v", h.TimersLeft(), h.Machines[h.Part("y")].Query("y"), h.Machines[h.Part("x")].Query("x"))
	}
	h.CheckReplay()
}

// fatalT records the first failure of a test run on its own goroutine.
type fatalT struct {
	testing.TB
	msg string
}

func (f *fatalT) Helper() {}
func (f *fatalT) Fatal(args ...any) {
	f.msg = fmt.Sprint(args...)
	runtime.Goexit()
}
func (f *fatalT) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// failure runs f and returns how it failed ("" if it did not).
func failure(t *testing.T, f func(tb testing.TB)) string {
	ft := &fatalT{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(ft)
	}()
	<-done
	return ft.msg
}

// The harness fails a test on what the engine would not do or a workload
// must not do, and CheckReplay on a machine its snapshot or fork gets
// wrong.
func TestHarnessCatches(t *testing.T) {
	for _, c := range []struct {
		name string
		run  func(h *harness)
		flaw string
		want string
	}{
		{"wrong reply type", func(h *harness) { h.Client("a", &op{Kind: "reply-string", Key: "a"}) }, "", "reply string"},
		{"unchanged with effects", func(h *harness) { h.Client("a", &op{Kind: "unchanged-send", Key: "a"}) }, "", "declared Unchanged but sent"},
		{"message to another workload", func(h *harness) { h.Client("a", &op{Kind: "send-elsewhere", Key: "a"}) }, "", "a message to workload 43"},
		{"replay differs", func(h *harness) {
			h.Client("a", &op{Kind: "add", Key: "a", N: 1})
			h.CheckReplay()
		}, "global", "replaying 1 inputs gives a different state"},
		{"restore loses state", func(h *harness) {
			h.Client("x1", &op{Kind: "add", Key: "x1", N: 1})
			h.CheckReplay()
		}, "restore", "snapshot → Restore → snapshot differs"},
		{"fork shares memory", func(h *harness) {
			h.Client("a", &op{Kind: "add", Key: "a", N: 1})
			h.Poke = func(m *counts) { m.n["poked"] = 1 }
			h.CheckReplay()
		}, "share", "fork encodes a different state"},
	} {
		got := failure(t, func(tb testing.TB) { c.run(enginetest.NewHarness[*counts, int64](tb, tally{flaw: c.flaw}, 2, 1)) })
		if !strings.Contains(got, c.want) {
			t.Errorf("%s: failed with %q, want %q", c.name, got, c.want)
		}
	}
	if got := failure(t, func(tb testing.TB) { newHarness(tb, tally{}, 1).CheckReplay() }); got != "" {
		t.Errorf("a sound machine failed: %s", got)
	}
}

// OpenEngine runs the workload on the real log; opening the directory
// again recovers it.
func TestOpenEngineRestarts(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	eng := enginetest.OpenEngine(t, dir, engine.Options{Partitions: 2}, tally{})
	for range 3 {
		if _, err := engine.Do[int64](ctx, eng, eng.PartitionOf("a"), tallyID, &op{Kind: "add", Key: "a", N: 2, To: "b"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := eng.Close(); err != nil {
		t.Fatal(err)
	}
	eng = enginetest.OpenEngine(t, dir, engine.Options{Partitions: 2}, tally{})
	defer eng.Close()
	a, err := engine.Query[int64](ctx, eng, eng.PartitionOf("a"), tallyID, "a")
	if err != nil || a != 6 {
		t.Fatalf("a after a restart: %d, %v", a, err)
	}
}
