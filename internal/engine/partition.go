package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/surge-run/surge/internal/cmdlog"
)

// partition is one share of every workload's state, changed only by its
// processor (runloop.go). This file holds that state and the apply path:
// each input is written into the batch as its log record and applied by
// its machine, and replay applies logged records the same way.
type partition struct {
	e        *Engine
	id       int
	machines []Machine // indexed by workload id
	inbox    chan *Request
	// kick wakes the processor for requests in the inbox; runMu is held
	// by whoever builds and commits a batch (the processor, or a
	// submitter serving it inline, see inline.go), and guards wake.
	kick  chan struct{}
	runMu sync.Mutex
	wake  *wakeups
	// parked: the processor is waiting (or about to) for a kick, mail
	// or a clock; only then do submitters serve batches themselves.
	parked atomic.Bool
	// procServed counts the processor's batches that took client
	// requests (the rest were served inline), for tests.
	procServed atomic.Uint64
	mail       mailbox
	free       chan *batch
	made       atomic.Int32 // batches made so far (takeBatch)

	ops  opsStats   // figures for operators (opsstats.go)
	mu   sync.Mutex // guards last and the fenced lists of batches
	last *batch     // the newest batch appended to the log
	// inflight is last != nil, stored with it, for whoever needs only
	// that without p.mu: the submit path, per command (inline.go,
	// coalescing), and the snapshot timer;
	// coalesced: a command queued since a batch's done waits for the
	// next one's (a done swaps it, and kicks).
	inflight, coalesced atomic.Bool
	// waiter is the log gathering this partition's batches into group
	// commits, when it says what would start the next one (nil if not).
	waiter atomic.Pointer[commitWaiter]

	// Engine-level durable state, rebuilt exactly by snapshot + replay.
	outSeq uint64
	outbox map[uint64]*outMsg
	lastTo map[int]uint64 // target → seq of the last message sent to it
	hwm    map[uint32]uint64
	timers timerTable
	// timerTraces holds the trace of a timer set by a traced input, in
	// memory only (nil until one is).
	timerTraces map[timerKey]TraceContext

	// records counts this partition's log records, as the log does: a
	// snapshot carries it, so recovery can tell whether the snapshot
	// covers every record the log has released.
	records uint64

	fx        Effects
	in        Input // the input being applied (apply)
	applying  uint8 // workload whose Apply is running (for SetTimer checks)
	sinceSnap int
	snapSize  atomic.Int64 // size of the last snapshot written
	// snapOut: a snapshot captured and not yet written (or given up).
	// The next waits for it (snapshotDue): each capture holds the state
	// it saw, payloads and ended chunks the live partition has since let
	// go included, so captures queued behind a slow writer would each pin
	// a whole state (a storm of 1 MiB jobs queued 22 of them, 14 GB).
	// With one at a time a partition pins at most one state besides its
	// own, and the size the log-ratio brake reads is never stale.
	snapOut atomic.Bool
	dueKeys []timerKey
	mailBuf []mail

	// What changed since the last snapshot was captured, for its
	// triggers (see snapshotDue) besides sinceSnap, the inputs applied:
	// bytes of records logged (replayed ones included), the engine clock
	// at the capture, and the record count then (more records now means
	// the state changed). snapRetryNs: the time trigger found a batch in
	// flight and tries again no sooner than this.
	snapBytes   int64
	snapAtNs    int64
	snapRecords uint64
	snapRetryNs int64

	lastEnd atomic.Uint64 // end of the newest durable batch (or replayed record + 1)
	snapPos atomic.Uint64 // position the newest written snapshot covers

	// slotNs estimates how long a new request waits in the inbox per
	// request already there (see tooBusy); delays records every client
	// request's wait for the metrics.
	slotNs atomic.Int64
	delays delayHist
	// batches counts batch sizes and apply times for the metrics.
	batches batchHist

	// subMu is held (read) by submitters while they queue a request, so
	// that Close and (cluster mode) Release can wait until none can
	// enter. Cluster mode (see cluster.go, ownership.go): ownMu
	// serialises Acquire, Release and the snapshotter's bookkeeping; plog
	// is the partition's log while served.
	ownMu   sync.Mutex
	subMu   sync.RWMutex
	closed  bool // guarded by subMu: Close has shut this partition's gate
	plog    cmdlog.PartitionLog
	serving atomic.Bool
	failed  atomic.Bool   // the log failed: nothing more may leave
	gen     atomic.Uint64 // counts terms of ownership
	stopCh  chan struct{} // closed to stop the processor
	stopped chan struct{} // closed by the processor when it stopped
}

func newPartition(e *Engine, id int) *partition {
	p := &partition{
		e:      e,
		id:     id,
		inbox:  make(chan *Request, e.opts.InboxLen),
		kick:   make(chan struct{}, 1),
		free:   make(chan *batch, maxInflightBatches),
		outbox: make(map[uint64]*outMsg),
		lastTo: make(map[int]uint64),
		hwm:    make(map[uint32]uint64),
		timers: newTimerTable(),
	}
	p.mail.signal = make(chan struct{}, 1)
	p.stopCh = e.stop
	if w, ok := e.opts.Log.(cmdlog.CommitWaiter); ok && e.opts.Cluster == nil {
		p.waiter.Store(&commitWaiter{w})
	}
	p.fx.check = p.checkDecode
	maxID := 0
	for id := range e.workloads {
		maxID = max(maxID, int(id))
	}
	p.machines = make([]Machine, maxID+1)
	for wid, w := range e.workloads {
		p.machines[wid] = w.NewMachine(id)
	}
	return p
}

// takeBatch returns an idle batch, waiting for one to come back from the
// log if all maxInflightBatches are out.
func (p *partition) takeBatch() *batch {
	if b := p.tryTakeBatch(); b != nil {
		return b
	}
	return <-p.free
}

// tryTakeBatch is takeBatch without the wait: nil if every batch is out.
// Batches are made as they are first needed, not when the partition
// starts: a server of many partitions that are mostly quiet makes few
// (a batch is about 350 bytes before it holds anything).
func (p *partition) tryTakeBatch() *batch {
	select {
	case b := <-p.free:
		return b
	default:
	}
	for {
		n := p.made.Load()
		if n >= maxInflightBatches {
			return nil
		}
		if p.made.CompareAndSwap(n, n+1) {
			b := &batch{p: p}
			b.doneFn = b.done
			return b
		}
	}
}

// partitionProbe is a query that reads engine state on the partition's
// goroutine; only the package's own tests can make one.
type partitionProbe func(p *partition) any

func (p *partition) handle(b *batch, r *Request, now int64) {
	b.reqs = append(b.reqs, r)
	m := p.machines[r.workload]
	if r.cmd == nil {
		if probe, ok := r.query.(partitionProbe); ok {
			r.result = probe(p)
			return
		}
		r.result = m.Query(r.query)
		return
	}
	start := len(b.buf)
	b.buf = appendEnvelopeHeader(b.buf, FromClient, r.workload, now)
	var err error
	b.buf, err = r.cmd.AppendBinary(b.buf)
	if err != nil {
		b.buf = b.buf[:start]
		r.err = fmt.Errorf("engine: encoding command: %w", err)
		return
	}
	// Refused alone, before it is applied: no log takes the entry, and a
	// log that refused it after the apply would leave memory ahead of it.
	if n := len(b.buf) - start; n > cmdlog.MaxEntryBytes {
		b.buf = b.buf[:start]
		r.err = tooLarge("command", n)
		return
	}
	// Apply what replay will apply: the command decoded from the bytes
	// being logged. One that does not decode is refused and never logged.
	// A command its machine vouches for applies as it is (Canonical).
	cmd := r.cmd
	if c, ok := m.(Canonical); !ok || !c.Canonical(cmd) {
		if cmd, err = m.Decode(b.buf[start+envHeader:]); err != nil {
			b.buf = b.buf[:start]
			r.err = fmt.Errorf("%w: %v", ErrUndecodable, err)
			return
		}
	}
	b.record(start)
	if err := p.apply(b, r.workload, Input{Kind: FromClient, TimeNs: now, Cmd: cmd, Trace: r.tc}); err != nil {
		p.e.dropped("client command", p.id, err)
		r.err = err
		return
	}
	r.result = p.fx.reply
	if p.fx.Unlogged() {
		b.buf = b.buf[:start]
		b.offsets = b.offsets[:len(b.offsets)-1]
	}
}

func (p *partition) handleMail(b *batch, m *mail, now int64) {
	if m.ack {
		delete(p.outbox, m.seq)
		return
	}
	if m.seq <= p.hwm[m.src] {
		// A re-send of something already applied. Acknowledge it, but only
		// once whatever applied it is durable (the ack rides this batch or
		// is fenced behind the last one).
		b.acks = append(b.acks, ackTo{src: int(m.src), seq: m.seq})
		return
	}
	if p.e.clusterMode() && m.prev != p.hwm[m.src] {
		// An earlier message from src is still on its way (between nodes
		// mail can overtake mail): applying this one would raise the
		// high-water mark over it. Neither applied nor acknowledged, so
		// the sender sends it again, after the earlier one.
		return
	}
	start := len(b.buf)
	b.buf = appendEnvelopeHeader(b.buf, FromMessage, m.workload, now)
	b.buf = binary.LittleEndian.AppendUint32(b.buf, m.src)
	b.buf = binary.LittleEndian.AppendUint64(b.buf, m.seq)
	b.buf = append(b.buf, m.data...)
	b.record(start)
	if err := p.applyMessage(b, m.workload, m.src, m.seq, m.data, now, m.tc); err != nil {
		p.e.dropped("message", p.id, err)
	}
	b.acks = append(b.acks, ackTo{src: int(m.src), seq: m.seq})
}

func (p *partition) applyMessage(b *batch, wl uint8, src uint32, seq uint64, data []byte, now int64, tc *TraceContext) error {
	if seq <= p.hwm[src] {
		return nil
	}
	p.hwm[src] = seq
	m := p.machineFor(wl)
	if m == nil {
		return fmt.Errorf("unknown workload %d", wl)
	}
	cmd, err := m.Decode(data)
	if err != nil {
		return err
	}
	return p.apply(b, wl, Input{Kind: FromMessage, TimeNs: now, Cmd: cmd, Trace: p.traceInput(b, tc, FromMessage, wl, cmd)})
}

func (p *partition) fireTimer(b *batch, k timerKey, now int64) {
	start := len(b.buf)
	b.buf = appendEnvelopeHeader(b.buf, FromTimer, k.workload, now)
	b.buf = binary.LittleEndian.AppendUint16(b.buf, uint16(len(k.id)))
	b.buf = append(b.buf, k.id...)
	b.record(start)
	if m := p.e.opts.Metrics; m != nil {
		m.timerFired(k.id)
	}
	if err := p.applyTimer(b, k.workload, k.id, now); err != nil {
		p.e.dropped("timer", p.id, err)
	}
}

func (p *partition) applyTimer(b *batch, wl uint8, id string, now int64) error {
	t := p.timers.take(wl, id)
	if t == nil {
		return nil // cancelled, or already fired before a crash
	}
	m := p.machineFor(wl)
	if m == nil {
		return fmt.Errorf("unknown workload %d", wl)
	}
	cmd, err := m.Decode(t.data)
	if err != nil {
		return err
	}
	return p.apply(b, wl, Input{Kind: FromTimer, TimeNs: now, Cmd: cmd, TimerID: id,
		Trace: p.traceInput(b, p.timerTrace(wl, id), FromTimer, wl, cmd)})
}

func (p *partition) machineFor(wl uint8) Machine {
	if int(wl) < len(p.machines) {
		return p.machines[wl]
	}
	return nil
}

// checkDecode is Effects' check: the command must decode by the machine
// that will apply it, or it is refused before it can reach the log.
func (p *partition) checkDecode(wl uint8, data []byte) error {
	if wl == timerWorkload {
		wl = p.applying
	}
	m := p.machineFor(wl)
	if m == nil {
		return fmt.Errorf("unknown workload %d", wl)
	}
	if _, err := m.Decode(data); err != nil {
		return fmt.Errorf("workload %d cannot decode it: %w", wl, err)
	}
	return nil
}

// apply runs one input through its machine and turns the effects into
// engine state: outbox entries and timers. b is nil during replay, where
// sends are not delivered one by one: the whole outbox is re-sent after.
//
// A machine that panics is a workload bug; its input is dropped with its
// effects, the same way live and in replay (the machine may have changed
// part of its state before panicking, identically in both), so one bad
// input neither kills the process nor keeps it from starting again.
//
// The input is applied from p.in: Machine.Apply takes a pointer, and one
// to the caller's Input moved it to the heap, an allocation per input.
func (p *partition) apply(b *batch, wl uint8, input Input) error {
	p.in = input
	in := &p.in
	defer func() { p.in = Input{} }() // holds no command once applied
	p.fx.reset()
	p.applying = wl
	if err := p.applySafely(p.machines[wl], in); err != nil {
		p.fx.reset()
		return err
	}
	for _, s := range p.fx.sends {
		p.outSeq++
		m := &outMsg{seq: p.outSeq, target: p.e.PartitionOf(s.key), workload: s.workload, data: s.data}
		m.prev = p.lastTo[m.target]
		p.lastTo[m.target] = m.seq
		p.outbox[m.seq] = m
		if in.Trace.Valid() {
			tc := in.Trace
			m.tc = &tc
		}
		if b != nil {
			b.sends = append(b.sends, m)
		} else {
			m.durable.Store(true) // replayed from the log
		}
	}
	if b != nil {
		for _, v := range p.fx.notes {
			b.notes = append(b.notes, note{workload: wl, v: v})
		}
	}
	for _, t := range p.fx.timers {
		if t.cancel {
			p.timers.cancel(wl, t.id)
			p.setTimerTrace(wl, t.id, TraceContext{})
			continue
		}
		p.timers.set(wl, t.id, t.atNs, t.data)
		p.setTimerTrace(wl, t.id, timerParent(in))
	}
	p.stepsApplied(b, wl, in)
	p.sinceSnap++
	if b != nil {
		b.applyCount++
	}
	return nil
}

func (p *partition) applySafely(m Machine, in *Input) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("%w: %v", ErrApplyPanicked, v)
		}
	}()
	m.Apply(in, &p.fx)
	return nil
}

// replay applies one logged record during recovery. A record that cannot
// be applied is dropped exactly as the live path drops it (a message or
// timer whose command does not decode; the live path never logs such a
// client command), so a poison record cannot keep the node from starting.
// Only a record from a newer binary (an envelope version or workload this
// one does not know) is an error: skipping it would lose data silently.
func (p *partition) replay(data []byte) error {
	env, err := decodeEnvelope(data)
	if errors.Is(err, errNewerEnvelope) {
		return err
	}
	if err != nil {
		p.e.dropped("record", p.id, err)
		return nil
	}
	m := p.machineFor(env.workload)
	if m == nil {
		return fmt.Errorf("record of workload %d, which this binary does not know (written by a newer Surge? run that release)", env.workload)
	}
	switch env.kind {
	case FromClient:
		cmd, err := m.Decode(env.payload)
		if err != nil {
			p.e.dropped("client command", p.id, err)
			return nil
		}
		if err := p.apply(nil, env.workload, Input{Kind: FromClient, TimeNs: env.timeNs, Cmd: cmd}); err != nil {
			p.e.dropped("client command", p.id, err)
		}
	case FromMessage:
		if err := p.applyMessage(nil, env.workload, env.src, env.seq, env.payload, env.timeNs, nil); err != nil {
			p.e.dropped("message", p.id, err)
		}
	case FromTimer:
		if err := p.applyTimer(nil, env.workload, env.timerID, env.timeNs); err != nil {
			p.e.dropped("timer", p.id, err)
		}
	}
	return nil
}
