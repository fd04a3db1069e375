package engine

import (
	"time"

	"github.com/surge-run/surge/internal/cmdlog"
)

// note is one Effects.Notify value waiting for its batch to be durable.
type note struct {
	workload uint8
	v        any
}

// batch is one group of inputs applied together and appended to the log as
// one unit. Its replies, sends and acks wait for the log's done callback.
type batch struct {
	p        *partition
	reqs     []*Request
	offsets  []int // record boundaries in buf
	buf      []byte
	entries  []cmdlog.Entry
	sends    []*outMsg
	notes    []note
	acks     []ackTo
	snap     func(dst []byte) []byte // encodes the state as of this batch
	snapSize int                     // a good buffer size for it
	doneFn   cmdlog.DoneFunc

	// guarded by p.mu: filled by later batches that logged nothing but
	// whose answers must not overtake this batch.
	durable     bool
	fencedReqs  []*Request
	fencedAcks  []ackTo
	applyCount  int
	startedNano int64
	appendNano  int64       // when it was handed to the log, for opsStats
	trace       *BatchTrace // nil unless a request in it is traced
	steps       []StepTrace // traced messages, timers and declared steps
	// held are idle batches this one holds while it waits for the log,
	// one per inflightSlotBytes of its bytes beyond the first
	// (holdSlots), so that the partition's batches in flight stay within
	// inflightBatchBytes.
	held []*batch
}

func (b *batch) reset() {
	clear(b.reqs)
	b.reqs = b.reqs[:0]
	b.offsets = b.offsets[:0]
	b.buf = b.buf[:0]
	if cap(b.buf) > inflightSlotBytes {
		// A large batch (or one grown by a command refused as too
		// large): not worth keeping for every later batch, and the
		// partition's idle batches would otherwise keep
		// maxInflightBatches of these.
		b.buf = nil
	}
	clear(b.entries)
	b.entries = b.entries[:0]
	if cap(b.reqs) > keptBatchInputs {
		// Likewise for the slices of a batch of many inputs: the
		// partition's idle batches keep at most keptBatchInputs each.
		b.reqs, b.offsets, b.entries = nil, nil, nil
	}
	clear(b.sends)
	b.sends = b.sends[:0]
	clear(b.notes)
	b.notes = b.notes[:0]
	b.acks = b.acks[:0]
	b.snap = nil
	b.durable = false
	clear(b.fencedReqs)
	b.fencedReqs = b.fencedReqs[:0]
	b.fencedAcks = b.fencedAcks[:0]
	b.applyCount = 0
	b.appendNano = 0
	b.trace = nil
	clear(b.steps)
	b.steps = b.steps[:0]
}

func (b *batch) record(start int) { b.offsets = append(b.offsets, start) }

func (p *partition) commit(b *batch) {
	if p.e.opts.Metrics != nil && b.applyCount > 0 {
		p.batches.observe(b.applyCount, time.Now().UnixNano()-b.startedNano)
	}
	if fn := p.e.opts.batchBytes; fn != nil {
		fn(len(b.buf))
	}
	if p.e.opts.Tracer != nil {
		p.traceBatch(b)
		b.stepsAppended()
	}
	if len(b.offsets) == 0 {
		p.mu.Lock()
		if l := p.last; l != nil && !l.durable {
			l.fencedReqs = append(l.fencedReqs, b.reqs...)
			l.fencedAcks = append(l.fencedAcks, b.acks...)
			p.mu.Unlock()
		} else {
			p.mu.Unlock()
			var err error
			if p.e.failed.Load() {
				// The state may include a batch the log refused.
				err = ErrFailed
			} else if p.failed.Load() {
				err = errMoved
			} else {
				p.e.deliverAcks(p.id, b.acks)
			}
			releaseAll(b.reqs, err)
		}
		p.giveBack(b)
		return
	}
	if p.e.failed.Load() {
		releaseAll(b.reqs, ErrFailed)
		p.giveBack(b)
		return
	}
	if p.failed.Load() {
		// Cluster mode: the log refused an earlier batch, so this state
		// is discarded; the requests go to the partition's next owner.
		releaseAll(b.reqs, errMoved)
		p.giveBack(b)
		return
	}
	for i, start := range b.offsets {
		end := len(b.buf)
		if i+1 < len(b.offsets) {
			end = b.offsets[i+1]
		}
		b.entries = append(b.entries, cmdlog.Entry{Partition: uint32(p.id), Data: b.buf[start:end:end]})
	}
	p.records += uint64(len(b.entries))
	p.logged(int64(len(b.buf)))
	if now := p.e.now(); p.snapshotDue(now) {
		// Only the capture stalls this partition; the snapshotter encodes
		// once the batch is durable.
		b.snap, b.snapSize = p.captureSnapshot(now)
	}
	p.holdSlots(b)
	p.mu.Lock()
	p.last = b
	p.inflight.Store(true)
	p.mu.Unlock()
	b.appendNano = time.Now().UnixNano()
	p.ops.appliedBatch(b.applyCount, b.appendNano-b.startedNano)
	if p.plog != nil {
		p.plog.Append(b.entries, b.doneFn)
		return
	}
	p.e.opts.Log.Append(b.entries, b.doneFn)
}

// done runs on the log's completion goroutine: it must not block.
func (b *batch) done(first, end cmdlog.Position, err error) {
	p := b.p
	if err != nil && p.e.clusterMode() {
		p.lost(err)
		err = partitionErr(err)
	} else if p.failed.Load() {
		err = errMoved
	} else if err != nil {
		p.e.fail(err)
		err = ErrFailed
	} else if p.e.failed.Load() {
		// Durable, but it may build on a batch the log refused: nothing it
		// produced may leave the process.
		err = ErrFailed
	} else {
		p.lastEnd.Store(uint64(end))
		p.ops.durable(b.appendNano)
		if uint64(end) > p.e.doneEnd.Load() {
			p.e.doneEnd.Store(uint64(end)) // only this goroutine stores it
		}
		if b.snap != nil && p.e.opts.inlineSnapshots {
			// Before anything is released, so that whoever waits for
			// this batch (the simulation's probes) also waits for it.
			p.e.writeSnapshot(snapJob{p: p, pos: end, encode: b.snap, size: b.snapSize})
			b.snap = nil
		}
	}
	b.traceDurable()
	b.stepsDurable(err == nil)
	p.mu.Lock()
	b.durable = true
	if p.last == b {
		p.last = nil
		p.inflight.Store(false)
	}
	p.mu.Unlock()
	// Commands queued behind this batch did not kick the processor
	// (coalescing): this does, before the releases ready their
	// handlers, so that their batch is built while the log's writer
	// finishes this commit.
	if p.coalesced.Swap(false) || len(p.inbox) > 0 {
		p.kickProcessor()
	}
	releaseAll(b.reqs, err)
	releaseAll(b.fencedReqs, err)
	if err == nil {
		for _, m := range b.sends {
			m.sentNs.Store(p.e.mono())
			m.durable.Store(true)
			p.e.sendMail(m.target, m.mail(p.id))
		}
		p.e.deliverAcks(p.id, b.acks)
		p.e.deliverAcks(p.id, b.fencedAcks)
		fn := p.e.opts.Notify
		for _, n := range b.notes {
			if fn != nil {
				fn(p.id, n.workload, n.v)
			}
			if p.e.courier != nil {
				p.e.courier.pushNote(p.id, n.workload, n.v)
			}
		}
		if b.snap != nil {
			p.e.queueSnapshot(snapJob{p: p, gen: p.gen.Load(), pos: end, encode: b.snap, size: b.snapSize})
		}
	} else if b.snap != nil {
		// Not durable: nothing of it may be written.
		p.snapOut.Store(false)
	}
	p.giveBack(b)
}

// slotsFor is how many of the partition's batches a batch of n log bytes
// counts as while it waits for the log.
func slotsFor(n int) int {
	return min(max(1, (n+inflightSlotBytes-1)/inflightSlotBytes), maxInflightBatches)
}

// holdSlots makes b, about to be appended, hold one idle batch per slot
// it needs beyond its own, waiting for batches in flight to come back if
// need be (they do not need the partition's lock to).
func (p *partition) holdSlots(b *batch) {
	for range slotsFor(len(b.buf)) - 1 {
		b.held = append(b.held, p.takeBatch())
	}
}

// giveBack returns b, and the batches it held, to the partition.
func (p *partition) giveBack(b *batch) {
	held := b.held
	b.held = b.held[:0]
	for _, h := range held {
		p.free <- h
	}
	clear(held)
	p.free <- b
}

func releaseAll(reqs []*Request, err error) {
	for _, r := range reqs {
		if err != nil {
			r.err = err
		}
		r.done <- struct{}{}
	}
}
