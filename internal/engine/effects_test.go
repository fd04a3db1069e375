package engine_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/surge-run/surge/internal/engine"
)

// blob is a command of a chosen encoded size, or one that fails to encode.
type blob struct {
	n    int
	fail bool
}

func (b blob) AppendBinary(dst []byte) ([]byte, error) {
	if b.fail {
		return dst, errors.New("cannot encode")
	}
	return append(dst, make([]byte, b.n)...), nil
}

// A test drives a Machine with an Effects it made itself and reads what
// each Apply asked for: the reply, messages (encoded), timers set and
// cancelled in order, notes, whether the command would be logged.
func TestEffectsReadSide(t *testing.T) {
	m := bank{}.NewMachine(0)
	fx := new(engine.Effects)
	m.Apply(&engine.Input{Kind: engine.FromClient, Cmd: &transfer{From: "a", To: "b", N: 5, ID: 9}}, fx)
	if fx.Replied() != "ok" || fx.IsUnchanged() || fx.Unlogged() || len(fx.Timers()) != 0 || len(fx.Notes()) != 0 {
		t.Fatalf("transfer: reply %v, unchanged %v, timers %v, notes %v", fx.Replied(), fx.IsUnchanged(), fx.Timers(), fx.Notes())
	}
	sends := fx.Sends()
	if len(sends) != 1 || sends[0].Key != "b" || sends[0].Workload != 7 {
		t.Fatalf("transfer sends %+v", sends)
	}
	cmd, err := m.Decode(sends[0].Data)
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := cmd.(*credit); !ok || *c != (credit{To: "b", N: 5, ID: 9}) {
		t.Fatalf("the message decodes to %#v", cmd)
	}

	fx.Reset()
	m.Apply(&engine.Input{Kind: engine.FromClient, Cmd: &alarm{ID: "x", AtNs: 42}}, fx)
	m.Apply(&engine.Input{Kind: engine.FromClient, Cmd: &cancelAlarm{ID: "x"}}, fx)
	m.Apply(&engine.Input{Kind: engine.FromClient, Cmd: &alarm{ID: "x", AtNs: 43}}, fx)
	tm := fx.Timers()
	if len(fx.Sends()) != 0 || len(tm) != 3 || tm[0].ID != "x" || tm[0].AtNs != 42 || tm[0].Cancel ||
		!tm[1].Cancel || tm[2].AtNs != 43 || tm[2].Cancel {
		t.Fatalf("timers %+v (sends %v)", tm, fx.Sends())
	}
	if c, err := m.Decode(tm[2].Data); err != nil || *c.(*ring) != (ring{ID: "x"}) {
		t.Fatalf("the timer's command decodes to %#v, %v", c, err)
	}

	fx.Reset()
	m.Apply(&engine.Input{Kind: engine.FromTimer, TimerID: "x", Cmd: &ring{ID: "x"}}, fx)
	if n := fx.Notes(); len(n) != 1 || n[0] != "rang x" {
		t.Fatalf("notes %v", n)
	}

	// Unchanged alone leaves the command out of the log; any effect
	// beside it keeps it in.
	fx.Reset()
	fx.Unchanged()
	if !fx.IsUnchanged() || !fx.Unlogged() || fx.Replied() != nil {
		t.Fatalf("after Reset and Unchanged: unchanged %v, unlogged %v, reply %v", fx.IsUnchanged(), fx.Unlogged(), fx.Replied())
	}
	fx.Notify("n")
	if fx.Unlogged() {
		t.Fatal("a command that notifies is logged even if it declared Unchanged")
	}
	fx.Reset()
	fx.Unchanged()
	fx.CancelTimer("y")
	if fx.Unlogged() {
		t.Fatal("a command that cancels a timer is logged even if it declared Unchanged")
	}
}

// Outside the engine, Send and SetTimer refuse what they refuse inside it,
// and record nothing for a refusal.
func TestEffectsRefusals(t *testing.T) {
	for _, c := range []struct {
		name string
		do   func(fx *engine.Effects) error
		want error // nil: any error
		says string
	}{
		{"send nil", func(fx *engine.Effects) error { return fx.Send("k", 7, nil) }, nil, "nil command"},
		{"send unencodable", func(fx *engine.Effects) error { return fx.Send("k", 7, blob{fail: true}) }, nil, "cannot encode"},
		{"send too large", func(fx *engine.Effects) error { return fx.Send("k", 7, blob{n: engine.MaxCommandBytes + 1}) }, engine.ErrTooLarge, `message to "k" refused`},
		{"timer nil", func(fx *engine.Effects) error { return fx.SetTimer("t", 1, nil) }, nil, "nil command"},
		{"timer too large", func(fx *engine.Effects) error { return fx.SetTimer("t", 1, blob{n: engine.MaxCommandBytes + 1}) }, engine.ErrTooLarge, `timer "t" refused`},
		{"timer id too long", func(fx *engine.Effects) error {
			return fx.SetTimer(strings.Repeat("i", engine.MaxTimerIDBytes+1), 1, blob{n: 1})
		}, nil, "timer id of"},
	} {
		fx := new(engine.Effects)
		err := c.do(fx)
		if err == nil || (c.want != nil && !errors.Is(err, c.want)) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.says)
		}
		if len(fx.Sends()) != 0 || len(fx.Timers()) != 0 {
			t.Errorf("%s: the refusal was recorded: %v %v", c.name, fx.Sends(), fx.Timers())
		}
	}
	// At the limits they are taken.
	fx := new(engine.Effects)
	if err := fx.SetTimer(strings.Repeat("i", engine.MaxTimerIDBytes), 1, blob{n: engine.MaxCommandBytes}); err != nil {
		t.Fatal(err)
	}
	if err := fx.Send("k", 7, blob{n: 1}); err != nil {
		t.Fatal(err)
	}
	if len(fx.Sends()) != 1 || len(fx.Timers()) != 1 || len(fx.Timers()[0].Data) != engine.MaxCommandBytes {
		t.Fatalf("sends %d, timers %d", len(fx.Sends()), len(fx.Timers()))
	}
}

// Do, Query and QueryAll return the machine's answer as the type the
// caller names, and an error naming both types when it is another.
func TestTypedDoAndQuery(t *testing.T) {
	e := openEngine(t, t.TempDir(), 0)
	defer e.Close()
	ctx := context.Background()
	p := e.PartitionOf("a")
	if r, err := engine.Do[string](ctx, e, p, 7, &transfer{From: "a", To: "b", N: 3}); err != nil || r != "ok" {
		t.Fatalf("Do[string]: %q, %v", r, err)
	}
	if r, err := engine.Do[int](ctx, e, p, 7, &transfer{From: "a", To: "b", N: 3}); err == nil || r != 0 ||
		!strings.Contains(err.Error(), "answered *engine_test.transfer with a string, not a int") {
		t.Fatalf("Do[int] of a string reply: %v, %v", r, err)
	}
	if a, err := engine.Query[account](ctx, e, p, 7, getAccount{Key: "a"}); err != nil || a.debits != 6 {
		t.Fatalf("Query[account]: %+v, %v", a, err)
	}
	if _, err := engine.Query[*account](ctx, e, p, 7, getAccount{Key: "a"}); err == nil ||
		!strings.Contains(err.Error(), "with a engine_test.account, not a *engine_test.account") {
		t.Fatalf("Query[*account] of an account: %v", err)
	}
	if all, err := engine.QueryAll[account](ctx, e, 7, getAccount{Key: "a"}); err != nil || len(all) != e.Partitions() || all[p].debits != 6 {
		t.Fatalf("QueryAll[account]: %+v, %v", all, err)
	}
	if _, err := engine.QueryAll[string](ctx, e, 7, getAccount{Key: "a"}); err == nil || !strings.Contains(err.Error(), "not a string") {
		t.Fatalf("QueryAll[string] of accounts: %v", err)
	}
	// The ledger answers nil to a question it does not know: R's zero.
	if v, err := engine.Query[*account](ctx, e, p, 7, "what?"); err != nil || v != nil {
		t.Fatalf("a nil answer: %v, %v", v, err)
	}
	if _, err := engine.Do[string](ctx, e, p, 99, &transfer{}); err == nil || !strings.Contains(err.Error(), "unknown workload") {
		t.Fatalf("an engine error passes through: %v", err)
	}
}
