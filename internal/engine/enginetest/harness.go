package enginetest

import (
	"bytes"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/surge-run/surge/internal/engine"
)

// Start is the clock a Harness starts at (late 2023, in ns): a real date,
// so that times a workload prints or compares look like times.
const Start = 1_700_000_000_000_000_000

// maxDrainSteps bounds Drain, so a workload that keeps sending or
// re-arming forever fails its test instead of hanging it.
const maxDrainSteps = 1_000_000

// Logged is one input as the engine logs it: what replay applies again.
type Logged struct {
	Kind    engine.InputKind
	At      int64
	TimerID string
	Data    []byte
}

// Timer is a pending timer: when it fires and its encoded command.
type Timer struct {
	At   int64
	Data []byte
}

// Harness runs the Machines of one workload in N partitions the way the
// engine runs them, without the engine, log or clock: see the package
// comment. M is the workload's Machine type and R the type of its replies.
// Its fields are the state of the run, for a test to read (and to set
// before it starts: OnApply, Poke).
type Harness[M engine.Machine, R any] struct {
	T   testing.TB
	Rng *rand.Rand // from the seed: the run depends on nothing else
	N   int        // partitions
	Now int64      // the clock machines see, from Start; Advance moves it
	// Machines are the partitions' machines; CheckReplay replaces them.
	Machines []M
	// Log holds, per partition, every input the engine would have logged:
	// client commands that changed something, every message and firing.
	Log [][]Logged
	// Timers are the pending timers, per partition, by id.
	Timers []map[string]Timer
	// Queues are the messages sent and not yet delivered, per (source,
	// target) partition pair, oldest first.
	Queues map[[2]int][]engine.Message
	// OnApply, if set, sees every input applied (not the replays of
	// CheckReplay) with its reply and notes, after its effects took hold.
	OnApply func(p int, cmd engine.Command, res R, notes []any)
	// Poke, if set, changes a machine CheckReplay has just retired, after
	// forking its snapshot and before encoding the fork: whatever it
	// changes must not show in the fork, as the engine's partition goes
	// on applying while a fork is written.
	Poke func(m M)

	w engine.Workload
}

// NewHarness returns a harness running w's machines in n partitions, the
// random choices seeded by seed. Machines come from w.NewMachine and must
// be of type M.
func NewHarness[M engine.Machine, R any](t testing.TB, w engine.Workload, n int, seed uint64) *Harness[M, R] {
	h := &Harness[M, R]{T: t, Rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), N: n, Now: Start,
		Log: make([][]Logged, n), Queues: map[[2]int][]engine.Message{}, w: w}
	for p := range n {
		h.Machines = append(h.Machines, h.NewMachine(p))
		h.Timers = append(h.Timers, map[string]Timer{})
	}
	return h
}

// NewMachine returns a fresh machine for partition p, as the engine makes
// one before it restores a snapshot or replays the log.
func (h *Harness[M, R]) NewMachine(p int) M {
	h.T.Helper()
	v := h.w.NewMachine(p)
	m, ok := v.(M)
	if !ok {
		h.T.Fatalf("%s's NewMachine returns a %T, not the harness's machine type", h.w.Name(), v)
	}
	return m
}

// Part returns the partition that owns key, as the engine routes it.
func (h *Harness[M, R]) Part(key string) int { return engine.PartitionOfHash(engine.Hash(key), h.N) }

// Client applies cmd as a client command at key's partition and returns
// the reply. A command the machine calls canonical (engine.Canonical) is
// applied as it is, as the engine applies it, once its bytes are seen to
// decode; CheckReplay then tells whether its decoded copy would have
// left the same state.
func (h *Harness[M, R]) Client(key string, cmd engine.Command) R {
	h.T.Helper()
	data, err := cmd.AppendBinary(nil)
	if err != nil {
		h.T.Fatal(err)
	}
	p := h.Part(key)
	if c, ok := any(h.Machines[p]).(engine.Canonical); !ok || !c.Canonical(cmd) {
		cmd = nil
	}
	return h.apply(p, engine.FromClient, "", data, cmd)
}

// Apply applies the encoded command data to partition p's machine as the
// engine would deliver it (decoded from its bytes, stamped with Now),
// keeps its effects (logs it, queues its messages, sets its timers) and
// returns its reply. The test fails if the reply is not an R, if the
// command declared Unchanged but sent, timed or noted something, or if a
// message or timer command does not decode.
func (h *Harness[M, R]) Apply(p int, kind engine.InputKind, timerID string, data []byte) R {
	h.T.Helper()
	return h.apply(p, kind, timerID, data, nil)
}

// apply is Apply, of orig instead of data's decoded copy if orig is not
// nil.
func (h *Harness[M, R]) apply(p int, kind engine.InputKind, timerID string, data []byte, orig engine.Command) R {
	h.T.Helper()
	m := h.Machines[p]
	cmd, err := m.Decode(data)
	if err != nil {
		h.T.Fatalf("decode: %v", err)
	}
	if orig != nil {
		cmd = orig
	}
	fx := new(engine.Effects)
	m.Apply(&engine.Input{Kind: kind, TimeNs: h.Now, Cmd: cmd, TimerID: timerID}, fx)
	res, ok := fx.Replied().(R)
	if !ok {
		h.T.Fatalf("%T: reply %T", cmd, fx.Replied())
	}
	if kind != engine.FromClient || !fx.Unlogged() {
		h.Log[p] = append(h.Log[p], Logged{Kind: kind, At: h.Now, TimerID: timerID, Data: data})
	}
	if fx.IsUnchanged() && !fx.Unlogged() {
		h.T.Fatalf("%T declared Unchanged but sent, set or cancelled timers, or notified", cmd)
	}
	h.keep(p, fx)
	if h.OnApply != nil {
		h.OnApply(p, cmd, res, fx.Notes())
	}
	return res
}

// keep turns p's effects into pending messages and timers, checking that
// their commands decode where they will be applied (Effects made outside
// the engine cannot check that itself).
func (h *Harness[M, R]) keep(p int, fx *engine.Effects) {
	h.T.Helper()
	for _, s := range fx.Sends() {
		if s.Workload != h.w.ID() {
			h.T.Fatalf("a message to workload %d: the harness runs only %s (%d)", s.Workload, h.w.Name(), h.w.ID())
		}
		to := h.Part(s.Key)
		if _, err := h.Machines[to].Decode(s.Data); err != nil {
			h.T.Fatalf("a message to %q does not decode from its own encoding: %v", s.Key, err)
		}
		h.Queues[[2]int{p, to}] = append(h.Queues[[2]int{p, to}], s)
	}
	for _, op := range fx.Timers() {
		if op.Cancel {
			delete(h.Timers[p], op.ID)
			continue
		}
		if _, err := h.Machines[p].Decode(op.Data); err != nil {
			h.T.Fatalf("timer %q's command does not decode from its own encoding: %v", op.ID, err)
		}
		h.Timers[p][op.ID] = Timer{At: op.AtNs, Data: op.Data}
	}
}

// Deliver applies the oldest message of a random (source, target) pair:
// FIFO within a pair, any order across pairs, as the engine may deliver
// them. It reports whether there was one.
func (h *Harness[M, R]) Deliver() bool {
	ks := h.pendingPairs()
	if len(ks) == 0 {
		return false
	}
	k := ks[h.Rng.IntN(len(ks))]
	msg := h.Queues[k][0]
	h.Queues[k] = h.Queues[k][1:]
	h.Apply(k[1], engine.FromMessage, "", msg.Data)
	return true
}

func (h *Harness[M, R]) pendingPairs() [][2]int {
	var ks [][2]int
	for k, q := range h.Queues {
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

// Advance moves the clock by d and fires every timer now due, earliest
// first (ties by partition and id, so the order is the seed's).
func (h *Harness[M, R]) Advance(d int64) {
	h.Now += d
	for {
		bestP, bestID := -1, ""
		var best Timer
		for p, ts := range h.Timers {
			for id, t := range ts {
				if t.At > h.Now {
					continue
				}
				if bestP < 0 || t.At < best.At || (t.At == best.At && (p < bestP || (p == bestP && id < bestID))) {
					bestP, bestID, best = p, id, t
				}
			}
		}
		if bestP < 0 {
			return
		}
		delete(h.Timers[bestP], bestID)
		h.Apply(bestP, engine.FromTimer, bestID, best.Data)
	}
}

// TimersLeft counts the pending timers of every partition.
func (h *Harness[M, R]) TimersLeft() int {
	n := 0
	for _, ts := range h.Timers {
		n += len(ts)
	}
	return n
}

// Drain delivers every message and fires every timer, moving the clock
// to each next timer, until nothing is pending.
func (h *Harness[M, R]) Drain() {
	h.T.Helper()
	for range maxDrainSteps {
		if h.Deliver() {
			continue
		}
		if h.TimersLeft() == 0 {
			return
		}
		next := int64(-1)
		for _, ts := range h.Timers {
			for _, t := range ts {
				if next < 0 || t.At < next {
					next = t.At
				}
			}
		}
		h.Advance(max(0, next-h.Now))
	}
	h.T.Fatal("drain did not finish")
}

// CheckReplay checks every partition's machine the three ways the engine
// rebuilds one: replaying the partition's log into a fresh machine must
// give byte-identical snapshots; the snapshot must restore to a machine
// that encodes the same bytes; and, for a machine that forks its
// snapshots (engine.SnapshotForker), a fork taken now must encode them
// too after Poke changed the original. The run then goes on with the
// restored machines (even partitions) or the replayed ones (odd), so
// state lost by both encodings alike shows up in later checks.
func (h *Harness[M, R]) CheckReplay() {
	h.T.Helper()
	for p, m := range h.Machines {
		want := m.AppendSnapshot(nil)
		var fork func([]byte) []byte
		if f, ok := any(m).(engine.SnapshotForker); ok {
			fork = f.ForkSnapshot()
		}
		fresh := h.NewMachine(p)
		Replay(h.T, fresh, h.Log[p])
		if got := fresh.AppendSnapshot(nil); !bytes.Equal(got, want) {
			h.T.Fatalf("partition %d: replaying %d inputs gives a different state (%d bytes, want %d)", p, len(h.Log[p]), len(got), len(want))
		}
		restored := h.NewMachine(p)
		if err := restored.Restore(want); err != nil {
			h.T.Fatalf("partition %d: restore: %v", p, err)
		}
		if got := restored.AppendSnapshot(nil); !bytes.Equal(got, want) {
			h.T.Fatalf("partition %d: snapshot → Restore → snapshot differs", p)
		}
		if p%2 == 0 {
			h.Machines[p] = restored
		} else {
			h.Machines[p] = fresh
		}
		if fork == nil {
			continue
		}
		if h.Poke != nil {
			h.Poke(m)
		}
		if got := fork(nil); !bytes.Equal(got, want) {
			h.T.Fatalf("partition %d: fork encodes a different state", p)
		}
	}
}

// Replay applies logged inputs to m in order, as the engine replays a
// partition's log after a restart: decoded from their bytes, with their
// logged time. Their effects are dropped: a Harness keeps the pending
// timers and messages of its run, which replay must not touch.
func Replay(t testing.TB, m engine.Machine, log []Logged) {
	t.Helper()
	fx := new(engine.Effects)
	for _, in := range log {
		cmd, err := m.Decode(in.Data)
		if err != nil {
			t.Fatal(err)
		}
		fx.Reset()
		m.Apply(&engine.Input{Kind: in.Kind, TimeNs: in.At, Cmd: cmd, TimerID: in.TimerID}, fx)
	}
}
