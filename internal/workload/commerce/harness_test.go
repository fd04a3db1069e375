package commerce

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/surge-run/surge/internal/engine"
)

// The harness runs several partitions' Machines the way the engine does,
// without the engine: a client command goes to its key's partition, a
// Send becomes a message queued per (source, target) partition pair and
// delivered in FIFO order within the pair but in a random order across
// pairs, and timers fire once the clock passes them. Every input applied
// is logged per partition as the engine would log it, so a test can
// replay the log into fresh machines. Randomness comes from the seed only.

type loggedInput struct {
	kind    engine.InputKind
	at      int64
	timerID string
	data    []byte
}

type message struct {
	key  string
	data []byte
}

type timer struct {
	at   int64
	data []byte
}

// recorder is an Effects that keeps what an Apply asked for. Like the
// engine, it encodes each message and timer command at once and checks
// that it decodes.
type recorder struct {
	t         testing.TB
	reply     any
	unchanged bool
	sends     []message
	timers    map[string]*timer // nil entry: cancelled
	order     []string
	notes     []any
}

func (r *recorder) Notify(v any) { r.notes = append(r.notes, v) }

func (r *recorder) Reply(v any) { r.reply = v }
func (r *recorder) Unchanged()  { r.unchanged = true }

func (r *recorder) encode(cmd engine.Command) []byte {
	data, err := cmd.AppendBinary(nil)
	if err != nil {
		r.t.Fatalf("encoding %T: %v", cmd, err)
	}
	if _, err := Decode(data); err != nil {
		r.t.Fatalf("%T does not decode from its own encoding: %v", cmd, err)
	}
	return data
}

func (r *recorder) Send(key string, wl uint8, cmd engine.Command) error {
	if wl != WorkloadID {
		r.t.Fatalf("message to workload %d", wl)
	}
	r.sends = append(r.sends, message{key: key, data: r.encode(cmd)})
	return nil
}

func (r *recorder) SetTimer(id string, at int64, cmd engine.Command) error {
	r.setTimer(id, &timer{at: at, data: r.encode(cmd)})
	return nil
}

func (r *recorder) CancelTimer(id string) { r.setTimer(id, nil) }

func (r *recorder) setTimer(id string, t *timer) {
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
	ms     []*Machine
	now    int64
	queues map[[2]int][]message
	timers []map[string]*timer
	log    [][]loggedInput
	// onApply, if set, sees every input applied (not the replays of
	// checkReplay) with its result and notes, after its effects.
	onApply func(p int, cmd engine.Command, res *Result, notes []any)
}

func newHarness(t testing.TB, seed uint64, n int) *harness {
	h := &harness{t: t, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), n: n,
		queues: map[[2]int][]message{}, now: 1_700_000_000_000_000_000}
	for range n {
		h.ms = append(h.ms, NewMachine())
		h.timers = append(h.timers, map[string]*timer{})
	}
	h.log = make([][]loggedInput, n)
	return h
}

func (h *harness) part(key string) int { return engine.PartitionOfHash(engine.Hash(key), h.n) }

// apply runs one input on partition p and routes its effects.
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
	changed := !fx.unchanged || len(fx.sends) > 0 || len(fx.timers) > 0
	if kind != engine.FromClient || changed {
		h.log[p] = append(h.log[p], loggedInput{kind: kind, at: h.now, timerID: timerID, data: data})
	}
	if fx.unchanged && (len(fx.sends) > 0 || len(fx.timers) > 0) {
		h.t.Fatalf("%T declared Unchanged but sent or set timers", cmd)
	}
	for _, s := range fx.sends {
		k := [2]int{p, h.part(s.key)}
		h.queues[k] = append(h.queues[k], s)
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

func (h *harness) pendingPairs() [][2]int {
	var ks [][2]int
	for k, q := range h.queues {
		if len(q) > 0 {
			ks = append(ks, k)
		}
	}
	sort.Slice(ks, func(i, j int) bool {
		if ks[i][0] != ks[j][0] {
			return ks[i][0] < ks[j][0]
		}
		return ks[i][1] < ks[j][1]
	})
	return ks
}

// deliver applies the oldest message of a random (source, target) pair.
func (h *harness) deliver() bool {
	ks := h.pendingPairs()
	if len(ks) == 0 {
		return false
	}
	k := ks[h.rng.IntN(len(ks))]
	msg := h.queues[k][0]
	h.queues[k] = h.queues[k][1:]
	h.apply(k[1], engine.FromMessage, "", msg.data)
	return true
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

func (h *harness) timersLeft() int {
	n := 0
	for _, ts := range h.timers {
		n += len(ts)
	}
	return n
}

// drain delivers every message and fires every timer.
func (h *harness) drain() {
	for range 1_000_000 {
		if h.deliver() {
			continue
		}
		if h.timersLeft() == 0 {
			return
		}
		next := int64(-1)
		for _, ts := range h.timers {
			for _, t := range ts {
				if next < 0 || t.at < next {
					next = t.at
				}
			}
		}
		h.advance(max(0, next-h.now))
	}
	h.t.Fatal("drain did not finish")
}

// checkReplay replays every partition's log into a fresh machine and
// requires byte-identical snapshots, and that a snapshot restores to a
// machine that encodes the same bytes. The run then goes on with the
// restored machines (or, every other partition, the replayed ones), so
// state a snapshot or replay lost shows up in the later checks even when
// it is missing from both encodings alike.
func (h *harness) checkReplay() {
	h.t.Helper()
	for p, m := range h.ms {
		want := m.AppendSnapshot(nil)
		fresh := NewMachine()
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
		restored := NewMachine()
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
	}
}

func (h *harness) String() string { return fmt.Sprintf("harness{now=%d}", h.now) }
