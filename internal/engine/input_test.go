package engine_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"
	"weak"

	"github.com/surge-run/surge/internal/engine"
)

// keepers is a test workload whose machine remembers, weakly, every
// command it applied, and the values of the Inputs it was given.
type keepers struct{ m *keeperMachine }

func (keepers) ID() uint8                       { return 10 }
func (keepers) Name() string                    { return "keepers" }
func (w keepers) NewMachine(int) engine.Machine { return w.m }

type keeperMachine struct {
	applied []weak.Pointer[kept]
	inputs  []engine.Input
}

// kept is padded past 16 bytes: a smaller object without pointers comes
// from the tiny allocator, which packs several in one block that is
// freed only when all of them are, so a weak pointer to one may stay
// valid because of a neighbour (the test failed one run in five so).
type kept struct {
	N byte
	_ [16]byte
}

func (c *kept) AppendBinary(b []byte) ([]byte, error) { return append(b, c.N), nil }

func (m *keeperMachine) Decode(b []byte) (engine.Command, error) {
	if len(b) != 1 {
		return nil, errors.New("one byte")
	}
	return &kept{N: b[0]}, nil
}

func (m *keeperMachine) Apply(in *engine.Input, fx *engine.Effects) {
	m.applied = append(m.applied, weak.Make(in.Cmd.(*kept)))
	m.inputs = append(m.inputs, *in)
	fx.Reply(in.Cmd.(*kept).N)
}

func (m *keeperMachine) Query(any) any                    { return len(m.applied) }
func (m *keeperMachine) AppendSnapshot(dst []byte) []byte { return dst }
func (m *keeperMachine) Restore([]byte) error             { return nil }

// The partition applies every input from one Input of its own (an input
// of the caller's escaped to the heap): each Apply still sees its own
// command and time, and once applied the engine holds no command, so a
// command the machine does not keep is garbage.
func TestAppliedCommandsAreNotKept(t *testing.T) {
	m := &keeperMachine{}
	e := openOnePartition(t, nil, keepers{m})
	defer e.Close()
	for n := range byte(3) {
		if got, err := e.Do(context.Background(), 0, 10, &kept{N: n}); err != nil || got != n {
			t.Fatalf("Do(%d) = %v, %v", n, got, err)
		}
	}
	// The engine is idle: nothing applies while the test reads the machine.
	for i, in := range m.inputs {
		if in.Kind != engine.FromClient || in.Cmd.(*kept).N != byte(i) || in.TimeNs == 0 {
			t.Errorf("input %d: %+v", i, in)
		}
	}
	m.inputs = nil
	deadline := time.Now().Add(30 * time.Second)
	for {
		runtime.GC()
		live := 0
		for _, w := range m.applied {
			if w.Value() != nil {
				live++
			}
		}
		if live == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d applied commands still reachable after the engine applied them", live, len(m.applied))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// canonKeeper is a keeperMachine that vouches for its even commands.
type canonKeeper struct{ *keeperMachine }

func (canonKeeper) Canonical(cmd engine.Command) bool { return cmd.(*kept).N%2 == 0 }

type canonKeepers struct{ m canonKeeper }

func (canonKeepers) ID() uint8                       { return 10 }
func (canonKeepers) Name() string                    { return "keepers" }
func (w canonKeepers) NewMachine(int) engine.Machine { return w.m }

// A command its machine calls canonical is applied as the caller made
// it; any other, as decoded from the bytes the engine logs.
func TestCanonicalCommandsApplyAsTheyAre(t *testing.T) {
	m := canonKeeper{&keeperMachine{}}
	e := openOnePartition(t, nil, canonKeepers{m})
	defer e.Close()
	var sent []*kept
	for n := range byte(4) {
		c := &kept{N: n}
		sent = append(sent, c)
		if got, err := e.Do(context.Background(), 0, 10, c); err != nil || got != n {
			t.Fatalf("Do(%d) = %v, %v", n, got, err)
		}
	}
	for i, c := range sent {
		same := m.applied[i].Value() == c
		if want := c.N%2 == 0; same != want {
			t.Errorf("command %d: applied the caller's own %v, want %v", i, same, want)
		}
	}
	runtime.KeepAlive(sent)
}
