package sequencer

import (
	"bytes"
	"slices"
	"testing"

	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/wire/wiretest"
)

func seedCommands() []engine.Command {
	return []engine.Command{
		&Publish{Group: "g", MsgID: "m1", Payload: []byte("hello"), RetentionNs: 60e9},
		&Publish{Group: "g", MsgID: "m2", Seq: 7},
		&PublishBatch{Msgs: []Publish{{Group: "g", MsgID: "a"}, {Group: "g", MsgID: "b", Seq: 3, Payload: []byte{0}}}},
		&Lease{Group: "g", Processor: "p", Max: 10, LeaseNs: 30e9},
		&Lease{Group: "g", Processor: "p", Max: 10, LeaseNs: 30e9, MaxBytes: 1 << 20},
		&Complete{Group: "g", Seq: 1, Processor: "p"},
		&Extend{Group: "g", Processor: "p", LeaseNs: 30e9},
		&Release{Group: "g", Processor: "p"},
		&Release{Group: "g", Processor: "p", Seqs: []uint64{2, 1 << 40}},
		&Commit{Group: "g", Consumer: "c", Position: 5},
		&DeleteGroup{Group: "g"},
		&LeaseExpired{Group: "g", Seq: 1 << 40},
		&PurgeMessages{},
		&CompleteBatch{Group: "g", Processor: "p", Seqs: []uint64{3, 1, 1 << 40, 3}},
		&CompleteBatch{Group: "g", Processor: "p", Seqs: []uint64{0}},
		// With the partition's limit of unreleased bytes.
		&Publish{Group: "g", MsgID: "m3", Payload: []byte("x"), MaxHeldBytes: 256 << 20},
		&PublishBatch{Msgs: []Publish{{Group: "g", MsgID: "c"}}, MaxHeldBytes: 1 << 20},
	}
}

// FuzzDecode: no input panics, and whatever decodes re-encodes to the
// same bytes (so a logged record means one command).
func FuzzDecode(f *testing.F) {
	for _, c := range seedCommands() {
		b, _ := c.AppendBinary(nil)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) { wiretest.RoundTrip(t, data, Decode) })
}

// snapshotSeed is a state with messages in every state, a gap, consumers
// and queued purges, in both modes.
func snapshotSeed(t testing.TB) []byte {
	h := newHarness(t, 7, 1, Limits{})
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		h.Client("", &Publish{Group: "srv", MsgID: id, Payload: []byte(id)})
	}
	for _, seq := range []uint64{1, 2, 3, 5, 6} {
		h.Client("", &Publish{Group: "cli", MsgID: string(rune('a' + seq)), Seq: seq})
	}
	for _, g := range []string{"srv", "cli"} {
		r := h.Client("", &Lease{Group: g, Processor: "p", Max: 4, LeaseNs: 1e12})
		h.Client("", &Complete{Group: g, Seq: r.Messages[0].Seq, Processor: "p"})
		h.Client("", &Complete{Group: g, Seq: r.Messages[1].Seq, Processor: "p"})
		h.Client("", &Complete{Group: g, Seq: r.Messages[3].Seq, Processor: "p"})
		h.Client("", &Commit{Group: g, Consumer: "c", Position: 1})
		h.Client("", &Commit{Group: g, Consumer: "d", Position: 0})
	}
	return h.Machines[0].AppendSnapshot(nil)
}

// FuzzRestore: no input panics; whatever restores encodes stably, and the
// restored machine survives every command touching its messages.
func FuzzRestore(f *testing.F) {
	f.Add(snapshotSeed(f))
	f.Add(NewMachine(Options{}).AppendSnapshot(nil))
	f.Fuzz(func(t *testing.T, data []byte) {
		m := NewMachine(Options{})
		if err := m.Restore(data); err != nil {
			if len(m.groups) != 0 || m.purgeQ.Len() != 0 {
				t.Fatal("a failed restore left state behind")
			}
			return
		}
		snap := m.AppendSnapshot(nil)
		m2 := NewMachine(Options{})
		if err := m2.Restore(snap); err != nil {
			t.Fatalf("re-restore: %v", err)
		}
		if again := m2.AppendSnapshot(nil); !bytes.Equal(again, snap) {
			t.Fatal("snapshot not stable")
		}
		fx := new(engine.Effects)
		now := int64(1e18)
		apply := func(kind engine.InputKind, at int64, c engine.Command) {
			m.Apply(&engine.Input{Kind: kind, TimeNs: at, Cmd: c}, fx)
		}
		names := make([]string, 0, len(m.groups))
		for n := range m.groups {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			g := m.groups[n]
			for seq := g.base; seq <= g.last(); seq++ {
				x := g.at(seq)
				apply(engine.FromTimer, now, &LeaseExpired{Group: n, Seq: seq})
				apply(engine.FromClient, now, &Complete{Group: n, Seq: seq, Processor: x.Processor})
				apply(engine.FromClient, now, &Publish{Group: n, MsgID: "new", Seq: seq})
			}
			apply(engine.FromClient, now, &Publish{Group: n, MsgID: "next"})
			apply(engine.FromClient, now, &Lease{Group: n, Processor: "x", Max: MaxLeaseBatch, LeaseNs: 1})
			var seqs []uint64
			for seq := g.base; seq <= g.last()+1 && len(seqs) < MaxLeaseBatch; seq++ {
				seqs = append(seqs, seq, seq) // each twice: the second is Same
			}
			if len(seqs) > 0 {
				apply(engine.FromClient, now, &CompleteBatch{Group: n, Processor: "x", Seqs: seqs[:min(len(seqs), MaxLeaseBatch)]})
			}
			apply(engine.FromClient, now, &Extend{Group: n, Processor: "x", LeaseNs: 1})
			apply(engine.FromClient, now, &Release{Group: n, Processor: "x"})
			apply(engine.FromClient, now, &Commit{Group: n, Consumer: "c", Position: g.position})
			m.Query(ReadOutput{Group: n})
			m.Query(GroupInfo{Group: n})
		}
		apply(engine.FromTimer, now*9, &PurgeMessages{})
		for _, n := range names {
			apply(engine.FromClient, now, &DeleteGroup{Group: n})
		}
	})
}
