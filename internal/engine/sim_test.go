package engine

// The crash simulation. A seeded random workload of transfers between
// partitions (a debit at one key sends a credit to another) and durable
// timers runs on a strict in-memory file system that loses every write not
// yet fsynced. At a random point the file system crashes: mid-write (a
// prefix of the write applied), between a write and its fsync, in the
// middle of a snapshot, a segment roll, a segment release, a seal, or a
// clean shutdown. The machine then "restarts" with what a power cut would
// have left on disk (synced data, plus a seeded random subset of the
// unsynced 4 KiB pages and directory entries, so later pages can survive
// where earlier ones did not), sometimes crashing again during recovery,
// and the invariants are checked:
//
//   - every acknowledged record is in the recovered log, byte for byte, at
//     its position (or was released, covered by a snapshot);
//   - the recovered state equals a replay of the whole log from the first
//     record, byte for byte (outboxes aside: acknowledgements are not
//     logged, so a replay keeps messages the live run had seen acknowledged);
//   - every acknowledged command is applied exactly once, in order per
//     partition; an unacknowledged one at most once;
//   - messages take effect exactly once (checked per message id, with
//     amounts that cannot cancel out);
//   - every acknowledged timer fires exactly once.
//
// All file operations happen on the log's writer goroutine (snapshots are
// written inline, the clock is the simulation's, and the workload is driven
// one step at a time until the engine is quiet), so a seed replays the same
// operations: go test ./internal/engine -run TestCrashSimulation -sim.seed=N.

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/surge-run/surge/internal/cmdlog"
	"github.com/surge-run/surge/internal/vfs"
	"github.com/surge-run/surge/internal/vfs/strictfs"
	"github.com/surge-run/surge/internal/wal"
	"github.com/surge-run/surge/internal/wire"
)

var (
	simSeeds = flag.Int("sim.seeds", 1000, "seeds TestCrashSimulation runs")
	simSeed  = flag.Int64("sim.seed", -1, "run only this crash-simulation seed (replays a failure)")
	simSoak  = flag.Duration("sim.soak", 0, "TestCrashSimulationSoak: run fresh seeds for this long")
	simTrace = flag.Bool("sim.trace", false, "log every step and file operation of the simulation")
)

// ---- the simulated workload ----

const simWL = 9

const (
	opDebit  = 1 // client: debit key, send a credit to `to`
	opCredit = 2 // message: credit key
	opArm    = 3 // client: set timer key at `at`
	opRing   = 4 // timer: count a firing
)

type simCmd struct {
	op      uint8
	id      uint64
	key, to string
	amount  uint64
	at      int64
}

func (c *simCmd) AppendBinary(b []byte) ([]byte, error) {
	w := wire.Writer{B: append(b, c.op)}
	w.U64(c.id)
	w.Str(c.key)
	w.Str(c.to)
	w.U64(c.amount)
	w.U64(uint64(c.at))
	return w.B, nil
}

type simWorkload struct{}

func (simWorkload) ID() uint8              { return simWL }
func (simWorkload) Name() string           { return "sim" }
func (simWorkload) NewMachine(int) Machine { return newSimMachine() }

type simMachine struct {
	order     []uint64          // debit ids in apply order
	debits    map[string]uint64 // key -> sum debited
	credits   map[uint64]uint64 // message id -> times applied
	creditSum map[string]uint64 // key -> sum credited
	fired     map[string]uint64 // timer id -> firings
}

func newSimMachine() *simMachine {
	return &simMachine{debits: map[string]uint64{}, credits: map[uint64]uint64{}, creditSum: map[string]uint64{}, fired: map[string]uint64{}}
}

func (m *simMachine) Apply(in *Input, fx *Effects) {
	c := in.Cmd.(*simCmd)
	switch c.op {
	case opDebit:
		m.order = append(m.order, c.id)
		m.debits[c.key] += c.amount
		if err := fx.Send(c.to, simWL, &simCmd{op: opCredit, id: c.id, key: c.to, amount: c.amount}); err != nil {
			panic(err)
		}
	case opCredit:
		if in.Kind != FromMessage {
			panic("credit not from a message")
		}
		m.credits[c.id]++
		m.creditSum[c.key] += c.amount
	case opArm:
		if err := fx.SetTimer(c.key, c.at, &simCmd{op: opRing, key: c.key}); err != nil {
			panic(err)
		}
	case opRing:
		if in.Kind != FromTimer || in.TimerID != c.key {
			panic("ring not from its timer")
		}
		m.fired[c.key]++
	}
	fx.Reply(true)
}

func (m *simMachine) Query(any) any { return nil }

func (m *simMachine) Decode(b []byte) (Command, error) {
	if len(b) == 0 || b[0] < opDebit || b[0] > opRing {
		return nil, errors.New("sim: bad command tag")
	}
	r := wire.Reader{B: b[1:]}
	c := &simCmd{op: b[0], id: r.U64(), key: r.Str(), to: r.Str(), amount: r.U64(), at: int64(r.U64())}
	return c, r.Err
}

func (m *simMachine) AppendSnapshot(dst []byte) []byte {
	w := wire.Writer{B: dst}
	w.Uvarint(uint64(len(m.order)))
	for _, id := range m.order {
		w.U64(id)
	}
	strMap := func(mp map[string]uint64) {
		w.Uvarint(uint64(len(mp)))
		for _, k := range slices.Sorted(maps.Keys(mp)) {
			w.Str(k)
			w.U64(mp[k])
		}
	}
	strMap(m.debits)
	w.Uvarint(uint64(len(m.credits)))
	for _, id := range slices.Sorted(maps.Keys(m.credits)) {
		w.U64(id)
		w.U64(m.credits[id])
	}
	strMap(m.creditSum)
	strMap(m.fired)
	return w.B
}

func (m *simMachine) Restore(b []byte) error {
	r := wire.Reader{B: b}
	for n := r.Count(8); n > 0; n-- {
		m.order = append(m.order, r.U64())
	}
	strMap := func(mp map[string]uint64) {
		for n := r.Count(9); n > 0; n-- { // a string of at least its length byte, and a uint64
			k := r.Str()
			mp[k] = r.U64()
		}
	}
	strMap(m.debits)
	for n := r.Count(16); n > 0; n-- {
		id := r.U64()
		m.credits[id] = r.U64()
	}
	strMap(m.creditSum)
	strMap(m.fired)
	return r.Err
}

// ---- the log the engine sees: the WAL, recording what it acknowledged ----

type simRec struct {
	part uint32
	data []byte
}

// shadowLog remembers every record the log reported durable, so the
// simulation can check that recovery still has them.
type shadowLog struct {
	*wal.Log
	run *simRun
}

func (s *shadowLog) Append(entries []cmdlog.Entry, done cmdlog.DoneFunc) {
	s.Log.Append(entries, func(first, end cmdlog.Position, err error) {
		if err == nil {
			s.run.mu.Lock()
			pos := first
			for _, e := range entries {
				s.run.durable[pos] = simRec{e.Partition, bytes.Clone(e.Data)}
				pos += cmdlog.Position(frameOverhead + len(e.Data))
			}
			s.run.mu.Unlock()
			if pos != end {
				panic(fmt.Sprintf("shadow: records end at %d, log says %d (frame header size changed?)", pos, end))
			}
		}
		done(first, end, err)
	})
}

// frameOverhead is the log's frame header size (format 2).
const frameOverhead = 16

// ---- one simulated run ----

const simParts = 4

type ackedOp struct {
	cmd  simCmd
	part int
}

type simRun struct {
	seed    int64
	rng     *rand.Rand
	fs      *strictfs.FS
	clock   atomic.Int64
	nosync  bool
	traceMu sync.Mutex
	ops     []string // every file operation, in order: what a seed must repeat
	tracef  func(format string, args ...any)

	snapEvery int
	e         *Engine
	lg        *wal.Log

	mu      sync.Mutex
	durable map[cmdlog.Position]simRec

	acked   []ackedOp
	unacked []simCmd // sent when the crash hit: may or may not have happened
	nextID  uint64
	keys    []string
	armed   int
}

var simQuiet = slog.New(slog.DiscardHandler)

func (r *simRun) options(lg cmdlog.Log, snaps SnapshotStore) Options {
	return Options{
		Partitions: simParts, Log: lg, Snapshots: snaps, SnapshotEvery: r.snapEvery,
		MaxBatch: 64, Logger: simQuiet, now: r.clock.Load, inlineSnapshots: true,
		// Shedding reads the real clock; the simulation must replay exactly.
		MaxQueueDelay: -1,
	}
}

// open opens the log, the snapshots and a recovered (not started) engine
// on fsys.
func (r *simRun) open(fsys vfs.FS) (*Engine, *wal.Log, error) {
	lg, err := wal.Open(wal.Options{Dir: "wal", FS: fsys, Partitions: simParts, SegmentBytes: 1 << 10,
		SealDelay: -1, NoSync: r.nosync, QueueLen: 64})
	if err != nil {
		return nil, nil, err
	}
	sd, err := wal.OpenSnapshotDir(fsys, "snap")
	if err != nil {
		lg.Close()
		return nil, nil, err
	}
	sd.NoSync = r.nosync
	e, err := recovered(r.options(&shadowLog{Log: lg, run: r}, sd), simWorkload{})
	if err != nil {
		lg.Close()
		return nil, nil, err
	}
	return e, lg, nil
}

func (r *simRun) crashed() bool { _, ok := r.fs.Crashed(); return ok }

// probe runs fn on partition part's goroutine.
func (r *simRun) probe(part int, fn func(p *partition) any) (any, error) {
	return r.e.Query(context.Background(), part, simWL, partitionProbe(fn))
}

// quiesce waits until no message is in flight: every outbox and mailbox is
// empty. Probes are released only after the batches before them are
// durable and their inline snapshots written, so then nothing the steps
// caused is left running, and the next step's file operations (and the
// Ops count a crash is armed from) do not depend on timing.
func (r *simRun) quiesce() error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		busy := false
		for part := range simParts {
			v, err := r.probe(part, func(p *partition) any { return len(p.outbox) + p.mail.len() })
			if err != nil {
				return err
			}
			if v.(int) > 0 {
				busy = true
			}
		}
		if !busy {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("the engine did not become quiet")
		}
		time.Sleep(20 * time.Microsecond)
	}
}

// fireTimers moves the clock and lets each partition, one at a time, fire
// what is due.
func (r *simRun) fireTimers(to int64) error {
	r.clock.Store(to)
	for _, p := range r.e.parts {
		select {
		case p.mail.signal <- struct{}{}:
		default:
		}
		if err := r.quiesce(); err != nil {
			return err
		}
	}
	return nil
}

// step runs one random action. An error after the file system crashed is
// the crash showing up, not a failure.
func (r *simRun) step(i int) error {
	ctx := context.Background()
	do := func(key string, c *simCmd) error {
		part := r.e.PartitionOf(key)
		_, err := r.e.Do(ctx, part, simWL, c)
		if err == nil {
			r.acked = append(r.acked, ackedOp{*c, part})
			return r.quiesce()
		}
		r.unacked = append(r.unacked, *c)
		return err
	}
	switch x := r.rng.IntN(100); {
	case x < 65:
		r.nextID++
		from, to := r.keys[r.rng.IntN(len(r.keys))], r.keys[r.rng.IntN(len(r.keys))]
		// Amounts unique per id, so a lost and a duplicated credit
		// cannot cancel out in the sums either.
		c := &simCmd{op: opDebit, id: r.nextID, key: from, to: to, amount: r.nextID*1_000_003 + 17}
		r.tracef("step %d: debit %d %s->%s", i, c.id, from, to)
		return do(from, c)
	case x < 80:
		r.armed++
		c := &simCmd{op: opArm, key: fmt.Sprintf("t%d", r.armed), at: r.clock.Load() + int64(1+r.rng.IntN(5))*int64(time.Hour)}
		r.tracef("step %d: arm %s at %d", i, c.key, c.at)
		return do(c.key, c)
	case x < 90:
		to := r.clock.Load() + int64(r.rng.IntN(4))*int64(time.Hour)
		r.tracef("step %d: clock to %d", i, to)
		return r.fireTimers(to)
	case x < 96:
		r.tracef("step %d: seal", i)
		return r.lg.Seal()
	default:
		r.tracef("step %d: clean restart", i)
		if err := r.e.Close(); err != nil {
			return err
		}
		e, lg, err := r.open(r.fs)
		if err != nil {
			return err
		}
		r.e, r.lg = e, lg
		e.start()
		return r.quiesce()
	}
}

// simCategory names where a crash hit, for the coverage check. (A write's
// path is the name its file was opened by: a segment's .wal.tmp name.)
func simCategory(op strictfs.Op) string {
	switch {
	case op.Kind == strictfs.OpKind(0):
		return "idle"
	case strings.Contains(op.Path, "snap"):
		return "snapshot"
	case op.Kind == strictfs.OpRemove:
		return "segment release"
	case op.Kind == strictfs.OpCreate || op.Kind == strictfs.OpRename || op.Kind == strictfs.OpSyncDir ||
		op.Kind == strictfs.OpMkdir || op.Kind == strictfs.OpWrite && op.Off == 0:
		return "segment roll"
	case op.Kind == strictfs.OpWrite:
		return "log write"
	}
	return "between log write and fsync"
}

// runSim runs one seed and returns where the crash hit and the first broken
// invariant, if any.
func runSim(seed int64, nosync bool, logf func(string, ...any)) (category string, trace []string, err error) {
	r := &simRun{
		seed:    seed,
		rng:     rand.New(rand.NewPCG(uint64(seed), 0x5eed)),
		fs:      strictfs.New(),
		nosync:  nosync,
		durable: map[cmdlog.Position]simRec{},
	}
	// The file operations, made one after another on the log's writer
	// goroutine, form the trace a seed must repeat; steps, logged from
	// this goroutine, are only logged.
	r.tracef = func(format string, args ...any) {
		if logf != nil {
			r.traceMu.Lock()
			logf(format, args...)
			r.traceMu.Unlock()
		}
	}
	// The crash draws how much of a write lands on the goroutine doing
	// the write, so it has its own generator.
	crashRng := rand.New(rand.NewPCG(uint64(seed), 0xc4a5))
	r.clock.Store(1_000_000 * int64(time.Hour))
	r.snapEvery = 3 + r.rng.IntN(20)
	for i := range 4 + r.rng.IntN(12) {
		r.keys = append(r.keys, fmt.Sprintf("k%d", i))
	}
	steps := 30 + r.rng.IntN(120)
	crashAt := r.rng.IntN(steps + 1)
	// A third of the seeds aim at the rarer places instead of a random
	// step: the n-th segment release, segment creation or snapshot rename.
	targets := []func(strictfs.Op) bool{
		func(op strictfs.Op) bool { return op.Kind == strictfs.OpRemove && strings.HasSuffix(op.Path, ".wal") },
		func(op strictfs.Op) bool {
			return op.Kind == strictfs.OpCreate && strings.HasSuffix(op.Path, ".wal.tmp")
		},
		func(op strictfs.Op) bool { return op.Kind == strictfs.OpRename && strings.Contains(op.Path, "snap") },
	}
	var target func(strictfs.Op) bool
	targetN := 1 + r.rng.IntN(3)
	if r.rng.IntN(3) == 0 {
		target = targets[r.rng.IntN(len(targets))]
		crashAt = -1
	}
	r.fs.SetHook(func(op strictfs.Op) {
		line := fmt.Sprintf("  fs %s %s @%d+%d", op.Kind, op.Path, op.Off, op.Len)
		r.traceMu.Lock()
		r.ops = append(r.ops, line)
		r.traceMu.Unlock()
		r.tracef("%s", line)
		if target != nil && target(op) {
			if targetN--; targetN == 0 {
				r.fs.CrashAt(r.fs.Ops()+1, crashRng)
			}
		}
	})

	e, lg, err := r.open(r.fs)
	if err != nil && !r.crashed() {
		return "", r.ops, fmt.Errorf("first open: %w", err)
	}
	if err == nil {
		r.e, r.lg = e, lg
		e.start()
	}
	for i := 0; i < steps && !r.crashed(); i++ {
		if i == crashAt {
			n := r.fs.Ops() + 1 + int64(r.rng.IntN(12))
			r.tracef("crash armed at op %d", n)
			r.fs.CrashAt(n, crashRng)
		}
		if err := r.step(i); err != nil && !r.crashed() {
			return "", r.ops, fmt.Errorf("step %d: %w", i, err)
		}
	}
	if !r.crashed() {
		r.fs.Crash() // power cut while idle
	}
	op, _ := r.fs.Crashed()
	category = simCategory(op)
	r.tracef("crashed at %s %s (%s)", op.Kind, op.Path, category)
	if r.e != nil {
		r.e.Close() // fails: the disk is gone; this only stops the goroutines
	}

	keep := []int{0, 0, 30, 60, 90, 100}[r.rng.IntN(6)]
	disk := r.fs.Restart(r.rng, keep)
	if r.rng.IntN(4) == 0 {
		// Crash again while recovering (cutting a torn tail, removing
		// temporary files...), then restart once more.
		disk.CrashAt(disk.Ops()+1+int64(r.rng.IntN(4)), r.rng)
		if e, lg, err := r.open(disk); err == nil {
			e.Close()
			lg.Close()
		}
		if _, ok := disk.Crashed(); ok {
			r.tracef("crashed again during recovery")
			disk = disk.Restart(r.rng, keep)
		} else {
			disk.CrashAt(0, nil)
		}
	}
	err = r.check(disk)
	r.traceMu.Lock()
	defer r.traceMu.Unlock()
	return category, r.ops, err
}

// check recovers from disk and verifies every invariant.
func (r *simRun) check(disk *strictfs.FS) error {
	e, lg, err := r.open(disk)
	if err != nil {
		return fmt.Errorf("recovery failed: %w", err)
	}
	r.e, r.lg = e, lg
	defer func() { e.Close() }()

	// 1. Every record the log acknowledged is still there, byte for byte.
	start, _ := lg.Start()
	full := map[cmdlog.Position]simRec{}
	if err := lg.Replay(start, func(pos cmdlog.Position, en cmdlog.Entry) error {
		full[pos] = simRec{en.Partition, bytes.Clone(en.Data)}
		return nil
	}); err != nil {
		return fmt.Errorf("replaying the recovered log: %w", err)
	}
	for pos, want := range r.durable {
		if pos < start {
			full[pos] = want // released: covered by a snapshot
			continue
		}
		got, ok := full[pos]
		if !ok || got.part != want.part || !bytes.Equal(got.data, want.data) {
			return fmt.Errorf("acknowledged record at position %d (partition %d) is missing or changed after recovery (log start %d, end %d)",
				pos, want.part, start, lg.End())
		}
	}

	// 2. The recovered state equals a replay of the whole log.
	if err := r.compareWithReplay(e, full); err != nil {
		return err
	}

	// 3. Run: messages in outboxes are re-sent, timers come due.
	e.start()
	if err := r.quiesce(); err != nil {
		return fmt.Errorf("after recovery: %w", err)
	}
	if err := r.fireTimers(r.clock.Load() + 10*int64(time.Hour)); err != nil {
		return fmt.Errorf("after recovery: %w", err)
	}
	return r.checkInvariants()
}

// compareWithReplay builds a second engine from the records alone, with no
// snapshot, and compares every partition's state byte for byte.
func (r *simRun) compareWithReplay(rec *Engine, full map[cmdlog.Position]simRec) error {
	refFS := strictfs.New()
	refLog, err := wal.Open(wal.Options{Dir: "wal", FS: refFS, Partitions: simParts, NoSync: true, SealDelay: -1})
	if err != nil {
		return err
	}
	for _, pos := range slices.Sorted(maps.Keys(full)) {
		ch := make(chan error, 1)
		refLog.Append([]cmdlog.Entry{{Partition: full[pos].part, Data: full[pos].data}}, func(_, _ cmdlog.Position, err error) { ch <- err })
		if err := <-ch; err != nil {
			return err
		}
	}
	sd, _ := wal.OpenSnapshotDir(refFS, "snap")
	ref, err := recovered(r.options(refLog, sd), simWorkload{})
	if err != nil {
		refLog.Close()
		return fmt.Errorf("replaying the whole log: %w", err)
	}
	defer ref.Close()
	for i := range simParts {
		a, b := rec.parts[i], ref.parts[i]
		if da, db := coreState(a), coreState(b); !bytes.Equal(da, db) {
			return fmt.Errorf("partition %d: recovered state (%d bytes) differs from a replay of the whole log (%d bytes)", i, len(da), len(db))
		}
		// Acknowledgements are not logged, so the replay still holds
		// messages the live run had removed once their receiver had them.
		for seq, m := range a.outbox {
			if n := b.outbox[seq]; n == nil || n.target != m.target || !bytes.Equal(n.data, m.data) {
				return fmt.Errorf("partition %d: message %d in the recovered outbox is not what the log sent", i, seq)
			}
		}
		for seq, m := range b.outbox {
			if a.outbox[seq] == nil && ref.parts[m.target].hwm[uint32(i)] < seq {
				return fmt.Errorf("partition %d: message %d is missing from the recovered outbox but its receiver never applied it", i, seq)
			}
		}
	}
	return nil
}

// coreState is the partition's snapshot without its outbox.
func coreState(p *partition) []byte {
	saved := p.outbox
	p.outbox = map[uint64]*outMsg{}
	defer func() { p.outbox = saved }()
	return p.appendSnapshot(nil)
}

func (r *simRun) machines() ([]*simMachine, error) {
	out := make([]*simMachine, simParts)
	for i := range simParts {
		v, err := r.probe(i, func(p *partition) any {
			m := newSimMachine()
			if err := m.Restore(p.machines[simWL].AppendSnapshot(nil)); err != nil {
				panic(err)
			}
			return m
		})
		if err != nil {
			return nil, err
		}
		out[i] = v.(*simMachine)
	}
	return out, nil
}

func (r *simRun) checkInvariants() error {
	ms, err := r.machines()
	if err != nil {
		return err
	}
	// Debits: each acknowledged one exactly once, in acknowledgement order
	// within its partition; unacknowledged ones at most once; nothing else.
	where := map[uint64]int{} // debit id -> index in its partition's order
	for part, m := range ms {
		for i, id := range m.order {
			if _, dup := where[id]; dup {
				return fmt.Errorf("debit %d applied twice", id)
			}
			where[id] = i
			if r.e.PartitionOf(r.debitKey(id)) != part {
				return fmt.Errorf("debit %d applied in partition %d, not its own", id, part)
			}
		}
	}
	last := make([]int, simParts)
	for i := range last {
		last[i] = -1
	}
	present := map[uint64]simCmd{}
	for _, a := range r.acked {
		if a.cmd.op != opDebit {
			continue
		}
		i, ok := where[a.cmd.id]
		if !ok {
			return fmt.Errorf("acknowledged debit %d is lost", a.cmd.id)
		}
		if i <= last[a.part] {
			return fmt.Errorf("acknowledged debit %d is out of order in partition %d", a.cmd.id, a.part)
		}
		last[a.part] = i
		present[a.cmd.id] = a.cmd
	}
	for _, c := range r.unacked {
		if _, ok := where[c.id]; ok && c.op == opDebit {
			present[c.id] = c
		}
	}
	if len(present) != len(where) {
		return fmt.Errorf("%d debits applied, but only %d were ever sent", len(where), len(present))
	}
	// Credits: exactly one per applied debit, at the right key.
	credited := map[string]uint64{}
	for _, c := range present {
		credited[c.to] += c.amount
		m := ms[r.e.PartitionOf(c.to)]
		if n := m.credits[c.id]; n != 1 {
			return fmt.Errorf("debit %d (%s->%s) was credited %d times", c.id, c.key, c.to, n)
		}
	}
	for part, m := range ms {
		for id, n := range m.credits {
			if _, ok := present[id]; !ok || n != 1 {
				return fmt.Errorf("partition %d: credit %d applied %d times without its debit", part, id, n)
			}
		}
		for k, sum := range m.creditSum {
			if sum != credited[k] {
				return fmt.Errorf("key %s: credited %d, debits sent it %d", k, sum, credited[k])
			}
		}
	}
	// Timers: acknowledged ones fire exactly once, others at most once.
	fired := map[string]uint64{}
	for _, m := range ms {
		for id, n := range m.fired {
			fired[id] += n
		}
	}
	for id, n := range fired {
		if n > 1 {
			return fmt.Errorf("timer %s fired %d times", id, n)
		}
	}
	for _, a := range r.acked {
		if a.cmd.op == opArm && fired[a.cmd.key] != 1 {
			return fmt.Errorf("acknowledged timer %s fired %d times", a.cmd.key, fired[a.cmd.key])
		}
	}
	return nil
}

func (r *simRun) debitKey(id uint64) string {
	for _, a := range r.acked {
		if a.cmd.id == id && a.cmd.op == opDebit {
			return a.cmd.key
		}
	}
	for _, c := range r.unacked {
		if c.id == id && c.op == opDebit {
			return c.key
		}
	}
	return ""
}

// ---- the tests ----

func simLogf(t *testing.T) func(string, ...any) {
	if *simTrace {
		return t.Logf
	}
	return nil
}

// TestCrashSimulation runs -sim.seeds seeds (1000 by default), two at a
// time, and checks that crashes hit every kind of place.
func TestCrashSimulation(t *testing.T) {
	if *simSeed >= 0 {
		cat, _, err := runSim(*simSeed, false, simLogf(t))
		t.Logf("seed %d: crash in %s", *simSeed, cat)
		if err != nil {
			t.Fatal(err)
		}
		return
	}
	n := *simSeeds
	if testing.Short() {
		n = min(n, 100)
	}
	var mu sync.Mutex
	hits := map[string]int{}
	var wg sync.WaitGroup
	const workers = 2
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seed := int64(w); seed < int64(n); seed += workers {
				cat, _, err := runSim(seed, false, nil)
				mu.Lock()
				hits[cat]++
				mu.Unlock()
				if err != nil {
					t.Errorf("seed %d (crash in %s): %v\n\treplay: go test ./internal/engine -run 'TestCrashSimulation$' -sim.seed=%d -sim.trace -v", seed, cat, err, seed)
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d seeds; crashes by place: %v", n, hits)
	if n >= 500 {
		for _, c := range []string{"log write", "between log write and fsync", "snapshot", "segment roll", "segment release"} {
			if hits[c] == 0 {
				t.Errorf("no seed crashed in %s", c)
			}
		}
	}
}

// TestCrashSimulationSoak runs fresh seeds for -sim.soak.
func TestCrashSimulationSoak(t *testing.T) {
	if *simSoak <= 0 {
		t.Skip("set -sim.soak=10m to run")
	}
	base := time.Now().UnixNano() & (1<<40 - 1)
	deadline := time.Now().Add(*simSoak)
	n := 0
	for seed := base; time.Now().Before(deadline); seed++ {
		if _, _, err := runSim(seed, false, nil); err != nil {
			t.Fatalf("seed %d: %v\n\treplay: go test ./internal/engine -run 'TestCrashSimulation$' -sim.seed=%d -sim.trace -v", seed, err, seed)
		}
		n++
	}
	t.Logf("%d seeds from %d, no failure", n, base)
}

// TestCrashSimulationIsDeterministic: a seed performs the same file
// operations and steps every time, so a failing seed can be replayed.
func TestCrashSimulationIsDeterministic(t *testing.T) {
	for seed := int64(0); seed < 20; seed++ {
		_, a, errA := runSim(seed, false, nil)
		_, b, errB := runSim(seed, false, nil)
		if fmt.Sprint(errA) != fmt.Sprint(errB) {
			t.Fatalf("seed %d: errors differ: %v / %v", seed, errA, errB)
		}
		if !slices.Equal(a, b) {
			for i := range min(len(a), len(b)) {
				if a[i] != b[i] {
					t.Fatalf("seed %d: traces differ at line %d: %q / %q", seed, i, a[i], b[i])
				}
			}
			t.Fatalf("seed %d: traces differ in length: %d / %d; the longer ends %q", seed, len(a), len(b), longer(a, b)[min(len(a), len(b)):])
		}
	}
}

// TestCrashSimulationSeesMissingFsync: with every fsync turned off (log and
// snapshots), the simulation must fail; otherwise it could not tell a
// durable engine from one that only looks durable.
func TestCrashSimulationSeesMissingFsync(t *testing.T) {
	failed := 0
	const seeds = 60
	for seed := int64(0); seed < seeds; seed++ {
		if _, _, err := runSim(seed, true, nil); err != nil {
			failed++
			if failed == 1 {
				t.Logf("seed %d without fsync: %v", seed, err)
			}
		}
	}
	t.Logf("%d of %d seeds failed with fsync off", failed, seeds)
	if failed == 0 {
		t.Fatal("the simulation passed with fsync off: it cannot see a missing fsync")
	}
}

func longer(a, b []string) []string {
	if len(a) > len(b) {
		return a
	}
	return b
}
