package sequencer

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/surge-run/surge/internal/engine"
)

// The harness runs several partitions' Machines the way the engine does,
// without it (jobs' harness, adapted): a client
// command goes to its key's partition, timers fire once the clock passes
// them, earliest first, and every logged input is kept per partition so a
// test can replay the log into fresh machines. Randomness comes from the
// seed only.

type loggedInput struct {
	kind    engine.InputKind
	at      int64
	timerID string
	data    []byte
}

type timer struct {
	at   int64
	data []byte
}

// recorder is an Effects that keeps what an Apply asked for; like the
// engine it encodes timer commands at once and checks they decode.
type recorder struct {
	t         testing.TB
	reply     any
	unchanged bool
	timers    map[string]*timer // nil entry: cancelled
	order     []string
	notes     []any
}

func (r *recorder) Reply(v any)  { r.reply = v }
func (r *recorder) Unchanged()   { r.unchanged = true }
func (r *recorder) Notify(v any) { r.notes = append(r.notes, v) }

func (r *recorder) SetTimer(id string, at int64, cmd engine.Command) error {
	data, err := cmd.AppendBinary(nil)
	if err != nil {
		r.t.Fatalf("encoding %T: %v", cmd, err)
	}
	if _, err := Decode(data); err != nil {
		r.t.Fatalf("%T does not decode from its own encoding: %v", cmd, err)
	}
	r.set(id, &timer{at: at, data: data})
	return nil
}

func (r *recorder) CancelTimer(id string) { r.set(id, nil) }

func (r *recorder) set(id string, t *timer) {
	if r.timers == nil {
		r.timers = map[string]*timer{}
	}
	if _, ok := r.timers[id]; !ok {
		r.order = append(r.order, id)
	}
	r.timers[id] = t
}

type harness struct {
	t      testing.TB
	rng    *rand.Rand
	n      int
	opts   []Options
	ms     []*Machine
	now    int64
	timers []map[string]*timer
	log    [][]loggedInput
	// onApply sees every input applied (not replays) after its effects.
	onApply func(p int, cmd engine.Command, res *Result, notes []any)
}

func newHarness(t testing.TB, seed uint64, n int, lim Limits) *harness {
	h := &harness{t: t, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), n: n,
		now: 1_700_000_000_000_000_000}
	w := &Workload{Limits: lim}
	for p := range n {
		m := w.NewMachine(p).(*Machine)
		h.ms = append(h.ms, m)
		h.opts = append(h.opts, m.opts)
		h.timers = append(h.timers, map[string]*timer{})
	}
	h.log = make([][]loggedInput, n)
	return h
}

func (h *harness) part(key string) int { return engine.PartitionOfHash(engine.Hash(key), h.n) }

func (h *harness) apply(p int, kind engine.InputKind, timerID string, data []byte) *Result {
	h.t.Helper()
	cmd, err := Decode(data)
	if err != nil {
		h.t.Fatalf("decode: %v", err)
	}
	fx := &recorder{t: h.t}
	h.ms[p].ApplyTo(&engine.Input{Kind: kind, TimeNs: h.now, Cmd: cmd, TimerID: timerID}, fx)
	res, ok := fx.reply.(*Result)
	if !ok {
		h.t.Fatalf("%T: reply %T", cmd, fx.reply)
	}
	changed := !fx.unchanged || len(fx.timers) > 0 || len(fx.notes) > 0
	if kind != engine.FromClient || changed {
		h.log[p] = append(h.log[p], loggedInput{kind: kind, at: h.now, timerID: timerID, data: data})
	}
	if fx.unchanged && (len(fx.timers) > 0 || len(fx.notes) > 0) {
		h.t.Fatalf("%T declared Unchanged but set timers or notified", cmd)
	}
	for _, id := range fx.order {
		if t := fx.timers[id]; t != nil {
			h.timers[p][id] = t
		} else {
			delete(h.timers[p], id)
		}
	}
	if h.onApply != nil {
		h.onApply(p, cmd, res, fx.notes)
	}
	return res
}

func (h *harness) client(key string, cmd engine.Command) *Result {
	h.t.Helper()
	data, err := cmd.AppendBinary(nil)
	if err != nil {
		h.t.Fatal(err)
	}
	return h.apply(h.part(key), engine.FromClient, "", data)
}

// advance moves the clock by d and fires every timer now due, earliest
// first (ties by partition and id, so the order is the seed's).
func (h *harness) advance(d int64) {
	h.now += d
	for {
		bestP, bestID := -1, ""
		var best *timer
		for p, ts := range h.timers {
			for id, t := range ts {
				if t.at > h.now {
					continue
				}
				if best == nil || t.at < best.at || (t.at == best.at && (p < bestP || (p == bestP && id < bestID))) {
					bestP, bestID, best = p, id, t
				}
			}
		}
		if best == nil {
			return
		}
		delete(h.timers[bestP], bestID)
		h.apply(bestP, engine.FromTimer, bestID, best.data)
	}
}

// checkReplay replays every partition's log into a fresh machine and
// requires byte-identical snapshots; a snapshot must restore to a machine
// that encodes the same bytes, and a fork taken now must encode them too
// even after the original goes on. The run continues with the restored
// (even partitions) or replayed (odd) machines, so state lost by both
// encodings alike shows up in later checks.
func (h *harness) checkReplay() {
	h.t.Helper()
	for p, m := range h.ms {
		want := m.AppendSnapshot(nil)
		fork := m.ForkSnapshot()
		fresh := NewMachine(h.opts[p])
		for _, in := range h.log[p] {
			cmd, err := Decode(in.data)
			if err != nil {
				h.t.Fatal(err)
			}
			fresh.ApplyTo(&engine.Input{Kind: in.kind, TimeNs: in.at, Cmd: cmd, TimerID: in.timerID}, &recorder{t: h.t})
		}
		if got := fresh.AppendSnapshot(nil); !bytes.Equal(got, want) {
			h.t.Fatalf("partition %d: replaying %d inputs gives a different state (%d bytes, want %d)", p, len(h.log[p]), len(got), len(want))
		}
		restored := NewMachine(h.opts[p])
		if err := restored.Restore(want); err != nil {
			h.t.Fatalf("partition %d: restore: %v", p, err)
		}
		if got := restored.AppendSnapshot(nil); !bytes.Equal(got, want) {
			h.t.Fatalf("partition %d: snapshot → Restore → snapshot differs", p)
		}
		if p%2 == 0 {
			h.ms[p] = restored
		} else {
			h.ms[p] = fresh
		}
		// The original goes on changing (a few steps on it) before the
		// fork is encoded, as the engine's partition does.
		h.pokeFork(m)
		if got := fork(nil); !bytes.Equal(got, want) {
			h.t.Fatalf("partition %d: fork encodes a different state", p)
		}
	}
}

// pokeFork changes m (no longer used by the run) the ways that could
// leak into a fork sharing its memory: messages leased, completed,
// released, purged, published into the window, consumers committed and
// groups deleted.
func (h *harness) pokeFork(m *Machine) {
	fx := &recorder{t: h.t}
	now := h.now
	apply := func(kind engine.InputKind, at int64, c engine.Command) *Result {
		m.ApplyTo(&engine.Input{Kind: kind, TimeNs: at, Cmd: c}, fx)
		return fx.reply.(*Result)
	}
	names := make([]string, 0, len(m.groups))
	for n := range m.groups {
		names = append(names, n)
	}
	for _, n := range names {
		g := m.groups[n]
		seq := uint64(0)
		if g.Mode == ModeClient {
			seq = g.last() + 1
		}
		apply(engine.FromClient, now, &Publish{Group: n, MsgID: "poke", Seq: seq, Payload: []byte("poke")})
		apply(engine.FromClient, now, &Extend{Group: n, Processor: "p1", LeaseNs: 1e12})
		apply(engine.FromClient, now, &Release{Group: n, Processor: "p2"})
		for seq := g.base; seq <= g.last(); seq++ {
			apply(engine.FromTimer, now+1e12, &LeaseExpired{Group: n, Seq: seq})
		}
		r := apply(engine.FromClient, now, &Lease{Group: n, Processor: "poke", Max: MaxLeaseBatch, LeaseNs: 1})
		// Half the leased messages one by one, the rest in one batch
		// (from the highest: the run goes out at its end).
		var batch []uint64
		for i, x := range r.Messages {
			if i%2 == 0 {
				apply(engine.FromClient, now, &Complete{Group: n, Seq: x.Seq, Processor: "poke"})
			} else {
				batch = append([]uint64{x.Seq}, batch...)
			}
		}
		if len(batch) > 0 {
			apply(engine.FromClient, now, &CompleteBatch{Group: n, Processor: "poke", Seqs: batch})
		}
		apply(engine.FromClient, now, &Commit{Group: n, Consumer: "poke", Position: g.position})
	}
	apply(engine.FromTimer, now+1e18, &PurgeMessages{})
	for _, n := range names {
		apply(engine.FromClient, now, &DeleteGroup{Group: n})
	}
}
