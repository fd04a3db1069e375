package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/surge-run/surge/internal/cmdlog"
)

// outMsg is a message this partition sent and the receiver has not yet
// acknowledged as durable. The outbox is part of the snapshot, so a message
// survives a crash on either side; the receiver's high-water mark per
// source drops the re-sends.
type outMsg struct {
	seq      uint64
	target   int
	workload uint8
	data     []byte
	sentNs   atomic.Int64 // cluster mode: when it was last sent (not durable)
	// durable is set once the command that sent it is durable; until
	// then it must not leave the partition, not even as a re-send.
	durable atomic.Bool
	// prev is the seq of the message this partition sent to the same
	// target before this one (0 for the first): across nodes, messages
	// can arrive out of order, and a receiver applies one only after the
	// one before it, so that its high-water mark never skips a message.
	prev uint64
}

func (m *outMsg) mail(src int) mail {
	return mail{src: uint32(src), seq: m.seq, prev: m.prev, workload: m.workload, data: m.data}
}

// mail is internal traffic between partitions: a message, or the
// acknowledgement that a message is durable at its receiver.
type mail struct {
	ack      bool
	src      uint32
	seq      uint64
	prev     uint64 // see outMsg.prev
	workload uint8
	data     []byte
}

// recordBytes is the size of the log record m becomes (acknowledgements
// become none).
func (m *mail) recordBytes() int {
	if m.ack {
		return 0
	}
	return msgHeader + len(m.data)
}

// mailbox is unbounded on purpose: it is filled from the log's completion
// callback, which must never block (a full inbox there could deadlock two
// partitions that message each other). Its growth is bounded by the
// bounded client inboxes that cause the traffic.
type mailbox struct {
	mu     sync.Mutex
	items  []mail
	head   int // items before it were taken
	signal chan struct{}
}

func (m *mailbox) push(x mail) {
	m.mu.Lock()
	m.items = append(m.items, x)
	m.mu.Unlock()
	select {
	case m.signal <- struct{}{}:
	default:
	}
}

// take removes up to max of the oldest pending items into dst, as long as
// their log records fit in maxBytes. Whatever
// is left re-arms the signal, so the processor comes back for it in its
// next batch: a batch never holds more than MaxBatch inputs, nor, since
// Effects.Send bounds every message, more than MaxBatchBytes. The rest is
// moved down only once the taken part is the larger half, so draining a
// long mailbox (a restart re-sends every unacknowledged message at once)
// costs each item one move, not one per batch taken before it.
func (m *mailbox) take(dst []mail, max, maxBytes int) []mail {
	m.mu.Lock()
	n, size := 0, 0
	for n < min(max, len(m.items)-m.head) {
		size += m.items[m.head+n].recordBytes()
		if size > maxBytes {
			break
		}
		n++
	}
	dst = append(dst, m.items[m.head:m.head+n]...)
	clear(m.items[m.head : m.head+n])
	m.head += n
	if m.head >= len(m.items)-m.head {
		rest := copy(m.items, m.items[m.head:])
		clear(m.items[rest:])
		m.items, m.head = m.items[:rest], 0
	}
	rest := len(m.items) - m.head
	m.mu.Unlock()
	if rest > 0 {
		select {
		case m.signal <- struct{}{}:
		default:
		}
	}
	return dst
}

func (m *mailbox) len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.items) - m.head
}

// reset drops every pending item.
func (m *mailbox) reset() {
	m.mu.Lock()
	clear(m.items)
	m.items, m.head = m.items[:0], 0
	m.mu.Unlock()
}

// note is one Effects.Notify value waiting for its batch to be durable.
type note struct {
	workload uint8
	v        any
}

type ackTo struct {
	src int
	seq uint64
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
}

func (b *batch) reset() {
	clear(b.reqs)
	b.reqs = b.reqs[:0]
	b.offsets = b.offsets[:0]
	b.buf = b.buf[:0]
	if cap(b.buf) > MaxBatchBytes {
		// Grown by a command refused as too large (or by append's
		// doubling): not worth keeping for every later batch.
		b.buf = nil
	}
	clear(b.entries)
	b.entries = b.entries[:0]
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
}

func (b *batch) record(start int) { b.offsets = append(b.offsets, start) }

type partition struct {
	e        *Engine
	id       int
	machines []Machine // indexed by workload id
	inbox    chan *Request
	mail     mailbox
	free     chan *batch

	mu   sync.Mutex // guards last and the fenced lists of batches
	last *batch     // the newest batch appended to the log

	// Engine-level durable state, rebuilt exactly by snapshot + replay.
	outSeq uint64
	outbox map[uint64]*outMsg
	lastTo map[int]uint64 // target → seq of the last message sent to it
	hwm    map[uint32]uint64
	timers timerTable

	// records counts this partition's log records, as the log does: a
	// snapshot carries it, so recovery can tell whether the snapshot
	// covers every record the log has released.
	records uint64

	fx        Effects
	applying  uint8 // workload whose Apply is running (for SetTimer checks)
	sinceSnap int
	snapSize  atomic.Int64 // size of the last snapshot written
	dueKeys   []timerKey
	mailBuf   []mail

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

	// Cluster mode (see cluster.go). ownMu serialises Acquire, Release
	// and the snapshotter's bookkeeping; subMu is held (read) by
	// submitters while they queue a request, so that Release can wait
	// until none can enter; plog is the partition's log while served.
	ownMu   sync.Mutex
	subMu   sync.RWMutex
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
		free:   make(chan *batch, maxInflightBatches),
		outbox: make(map[uint64]*outMsg),
		lastTo: make(map[int]uint64),
		hwm:    make(map[uint32]uint64),
		timers: newTimerTable(),
	}
	p.mail.signal = make(chan struct{}, 1)
	p.stopCh = e.stop
	p.fx.check = p.checkDecode
	maxID := 0
	for id := range e.workloads {
		maxID = max(maxID, int(id))
	}
	p.machines = make([]Machine, maxID+1)
	for wid, w := range e.workloads {
		p.machines[wid] = w.NewMachine(id)
	}
	for range maxInflightBatches {
		b := &batch{p: p}
		b.doneFn = b.done
		p.free <- b
	}
	return p
}

func (p *partition) run() {
	defer p.e.wg.Done()
	if p.stopped != nil {
		defer close(p.stopped)
	}
	tmr := time.NewTimer(time.Hour)
	tmr.Stop()
	armed := int64(0)
	snapTmr := time.NewTimer(time.Hour)
	snapTmr.Stop()
	snapArmed := int64(0)
	stopping := false
	var resendC <-chan time.Time
	if p.e.clusterMode() {
		t := time.NewTicker(p.e.opts.Cluster.ResendAfter / 2)
		defer t.Stop()
		resendC = t.C
	}
	for {
		b := <-p.free
		b.reset()

		var timerC <-chan time.Time
		if at, ok := p.timers.next(); ok {
			if at != armed {
				tmr.Reset(time.Duration(at - p.e.now()))
				armed = at
			}
			timerC = tmr.C
		}
		var snapC <-chan time.Time
		if at, ok := p.idleSnapshotAt(); ok {
			// Re-armed also when already due: the clock may have moved
			// past it without the real timer knowing (a simulated clock).
			if d := at - p.e.now(); at != snapArmed || d <= 0 {
				snapTmr.Reset(time.Duration(d))
				snapArmed = at
			}
			snapC = snapTmr.C
		}
		var first *Request
		if !stopping {
			select {
			case first = <-p.inbox:
			case <-p.mail.signal:
			case <-timerC:
				armed = 0
			case <-resendC:
				p.resend()
			case <-snapC:
				snapArmed = 0
				p.snapshotIdle()
			case <-p.stopCh:
				stopping = true
			}
		}
		now := p.e.now()
		b.startedNano = time.Now().UnixNano()
		var waits waitSample
		// One batch holds at most MaxBatch inputs. Client requests leave
		// room for up to half of it to pending mail, so that neither
		// starves the other, and an eighth to timers already due: under a
		// flood of client requests that fills every batch (a full inbox
		// refuses at submission, so nothing else makes room), timers such
		// as a workload's retention purge would otherwise never fire.
		maxBatch := p.e.opts.MaxBatch
		timerShare := 0
		if at, ok := p.timers.next(); ok && at <= now {
			timerShare = max(1, maxBatch/8)
		}
		pendingMail := p.mail.len()
		clientMax := maxBatch - min(pendingMail, maxBatch/2) - timerShare
		// In bytes the same shares: client requests are taken only while
		// the largest legal entry still fits below clientBytes, which
		// leaves room for one of pending mail's and for due timers.
		timerBytes := 0
		if timerShare > 0 {
			timerBytes = timerBatchBytes
		}
		clientBytes := MaxBatchBytes - timerBytes
		if pendingMail > 0 {
			clientBytes -= cmdlog.MaxEntryBytes
		}
		taken := 0
		if first != nil {
			taken++
			if p.admit(first, &waits) {
				p.handle(b, first, now)
			}
		}
	drain:
		for taken < clientMax && len(b.buf)+cmdlog.MaxEntryBytes <= clientBytes {
			select {
			case r := <-p.inbox:
				taken++
				if p.admit(r, &waits) {
					p.handle(b, r, now)
				}
			default:
				break drain
			}
		}
		p.learn(&waits)
		inputs := len(b.reqs)
		if room := maxBatch - inputs - timerShare; room > 0 {
			p.mailBuf = p.mail.take(p.mailBuf[:0], room, MaxBatchBytes-timerBytes-len(b.buf))
			for i := range p.mailBuf {
				p.handleMail(b, &p.mailBuf[i], now)
			}
			inputs += len(p.mailBuf)
			clear(p.mailBuf)
		}
		p.dueKeys = p.timers.popDue(now, p.dueKeys[:0], maxBatch-inputs, MaxBatchBytes-len(b.buf))
		for _, k := range p.dueKeys {
			p.fireTimer(b, k, now)
		}
		p.commit(b)
		if stopping && len(p.inbox) == 0 {
			// Wait for every in-flight batch so Close can snapshot. In
			// cluster mode the partition may be acquired again, and its
			// next processor needs the batches back.
			var bs [maxInflightBatches]*batch
			for i := range bs {
				bs[i] = <-p.free
			}
			for _, b := range bs {
				p.free <- b
			}
			return
		}
	}
}

// Admission.
//
// A partition serves its inbox in order, so what a client feels under
// overload is the time its request waits there, and that is what is bounded,
// not the queue's length (4,096 requests is 40 ms of fast commands but
// seconds of slow ones). Two rules, both for client commands only: queries
// are cheap and read-only, and mail and timers never pass through the inbox
// (they must never be dropped).
//
//  1. At submission, a command is refused at once (ErrOverloaded, the
//     API's 429) if the wait it would see, estimated as the requests
//     already queued times slotNs, is above half of MaxQueueDelay. slotNs
//     is learnt from what the processor measures: every request records
//     the queue length it joined and its wait is measured when it is
//     taken, so per batch slotNs ≈ Σ wait / Σ (queued ahead + 1), smoothed.
//     That includes whatever slows the partition (apply cost, fsync
//     back-pressure, CPU shared with the HTTP layer). The decision uses
//     the current queue length, so it ends the moment the queue drains:
//     no state is left "overloaded" when load stops; and a request that
//     finds a short queue is always admitted, so the estimate keeps
//     being corrected by fresh measurements.
//  2. At the head, a command that waited longer than MaxQueueDelay (the
//     estimate was wrong: a burst, a stall) is answered ErrOverloaded
//     without being applied, so nothing accepted starts later than that.
//     A request whose client has gone (context done) is answered with the
//     context's error and not applied either.
//
// Both rules apply only behind a queue of at least 256 requests.
// Shedding helps by shortening a queue; when few requests wait and they
// still wait long, the partition itself is stalled (a process starved of
// CPU, a slow disk) and refusing a handful would make no one faster, only
// fail callers that sent a moderate load to a busy machine.
//
// Cost: one clock read and a queue-length read at submission, one clock
// read per request taken; the estimate is published once per batch.

// defaultShedMinQueue is the queue length below which nothing is shed by
// delay (Options.shedMinQueue).
const defaultShedMinQueue = 256

// errExpired is ErrOverloaded for a command that waited too long.
var errExpired = fmt.Errorf("%w: the request waited in the queue longer than the limit and was not applied", ErrOverloaded)

// tooBusy says whether a command joining a queue of ahead requests would
// wait longer than the admission target, and the wait it predicts.
func (p *partition) tooBusy(ahead int) (time.Duration, bool) {
	a := p.e.admitNs
	if a <= 0 || ahead < p.e.opts.shedMinQueue {
		return 0, false
	}
	wait := p.waitBehind(ahead)
	return wait, int64(wait) > a
}

// waitBehind is the wait the partition predicts for a request joining
// its inbox behind ahead others, drained at the observed rate.
func (p *partition) waitBehind(ahead int) time.Duration {
	return time.Duration(int64(ahead) * p.slotNs.Load())
}

// overloaded is ErrOverloaded (or errExpired) with the wait the partition
// predicts for a request joining its inbox now, so the API can tell the
// client when to come back (RetryAfter) instead of a fixed pause that
// brings every refused client back at once.
type overloaded struct {
	err  error
	wait time.Duration
}

// Error carries the wait too, so that a node that relays the refusal
// (answerErr) can pass it on: see remoteErr.
func (o *overloaded) Error() string {
	return o.err.Error() + waitMark + o.wait.String() + ")"
}
func (o *overloaded) Unwrap() error { return o.err }

// RetryAfter is the wait the refusal predicts for a retry.
func (o *overloaded) RetryAfter() time.Duration { return o.wait }

// waitMark starts the predicted wait in an overload's message.
const waitMark = " (predicted wait "

// RetryAfter is the wait an ErrOverloaded predicts for a retry (the queue
// it was refused behind, drained at the observed rate), found as a
// RetryAfter method on err or an error it wraps; 0 if err carries no
// prediction.
func RetryAfter(err error) time.Duration {
	var o interface{ RetryAfter() time.Duration }
	if errors.As(err, &o) {
		return o.RetryAfter()
	}
	return 0
}

// waitSample sums one batch's measured waits for the slotNs estimate.
type waitSample struct {
	waitNs, slots int64
}

// admit is called as the processor takes r from the inbox. It records r's
// wait and answers r itself, returning false, if r must not be applied.
func (p *partition) admit(r *Request, s *waitSample) bool {
	waited := p.e.mono() - r.enq
	p.delays.observe(waited)
	s.waitNs += waited
	s.slots += int64(r.ahead) + 1
	var reason int
	switch {
	case r.ctx.Err() != nil:
		r.err, reason = r.ctx.Err(), shedCancelled
	case r.cmd != nil && p.e.maxWaitNs > 0 && waited > p.e.maxWaitNs && r.ahead >= p.e.opts.shedMinQueue:
		r.err, reason = &overloaded{err: errExpired, wait: p.waitBehind(len(p.inbox))}, shedExpired
	default:
		return true
	}
	p.shed(reason)
	r.done <- struct{}{}
	return false
}

// learn folds a batch's waits into slotNs: a moving average that follows
// a change within a few batches.
func (p *partition) learn(s *waitSample) {
	if s.slots == 0 {
		return
	}
	est := s.waitNs / s.slots
	if old := p.slotNs.Load(); old > 0 {
		est = old + (est-old)/4
	}
	p.slotNs.Store(est)
}

func (p *partition) shed(reason int) {
	if m := p.e.opts.Metrics; m != nil {
		m.shed[reason].Inc()
	}
}

// delayHist counts inbox waits in buckets of 50 µs × 2^i. Only the
// partition's processor writes it; the metrics read it at scrape time.
type delayHist struct {
	counts [delayBuckets + 1]atomic.Uint64 // the last is +Inf
	sumNs  atomic.Int64
}

const (
	delayBuckets = 18 // 50 µs .. 6.55 s
	delayBase    = 50_000
)

func delayBound(i int) float64 { return float64(int64(delayBase)<<i) / 1e9 }

func (h *delayHist) observe(ns int64) {
	i := 0
	if ns > 0 {
		i = min(bits.Len64(uint64(ns-1)/delayBase), delayBuckets)
	}
	h.counts[i].Add(1)
	h.sumNs.Add(ns)
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
	cmd, err := m.Decode(b.buf[start+envHeader:])
	if err != nil {
		b.buf = b.buf[:start]
		r.err = fmt.Errorf("%w: %v", ErrUndecodable, err)
		return
	}
	b.record(start)
	in := Input{Kind: FromClient, TimeNs: now, Cmd: cmd}
	if err := p.apply(b, r.workload, &in); err != nil {
		p.e.dropped("client command", p.id, err)
		r.err = err
		return
	}
	r.result = p.fx.reply
	if p.fx.unchanged && len(p.fx.sends) == 0 && len(p.fx.timers) == 0 && len(p.fx.notes) == 0 {
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
	if err := p.applyMessage(b, m.workload, m.src, m.seq, m.data, now); err != nil {
		p.e.dropped("message", p.id, err)
	}
	b.acks = append(b.acks, ackTo{src: int(m.src), seq: m.seq})
}

func (p *partition) applyMessage(b *batch, wl uint8, src uint32, seq uint64, data []byte, now int64) error {
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
	in := Input{Kind: FromMessage, TimeNs: now, Cmd: cmd}
	return p.apply(b, wl, &in)
}

func (p *partition) fireTimer(b *batch, k timerKey, now int64) {
	start := len(b.buf)
	b.buf = appendEnvelopeHeader(b.buf, FromTimer, k.workload, now)
	b.buf = binary.LittleEndian.AppendUint16(b.buf, uint16(len(k.id)))
	b.buf = append(b.buf, k.id...)
	b.record(start)
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
	in := Input{Kind: FromTimer, TimeNs: now, Cmd: cmd, TimerID: id}
	return p.apply(b, wl, &in)
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
func (p *partition) apply(b *batch, wl uint8, in *Input) error {
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
			continue
		}
		p.timers.set(wl, t.id, t.atNs, t.data)
	}
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
		in := Input{Kind: FromClient, TimeNs: env.timeNs, Cmd: cmd}
		if err := p.apply(nil, env.workload, &in); err != nil {
			p.e.dropped("client command", p.id, err)
		}
	case FromMessage:
		if err := p.applyMessage(nil, env.workload, env.src, env.seq, env.payload, env.timeNs); err != nil {
			p.e.dropped("message", p.id, err)
		}
	case FromTimer:
		if err := p.applyTimer(nil, env.workload, env.timerID, env.timeNs); err != nil {
			p.e.dropped("timer", p.id, err)
		}
	}
	return nil
}

func (p *partition) commit(b *batch) {
	if mt := p.e.opts.Metrics; mt != nil && b.applyCount > 0 {
		mt.observeBatch(b.applyCount, time.Now().UnixNano()-b.startedNano)
	}
	if fn := p.e.opts.batchBytes; fn != nil {
		fn(len(b.buf))
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
		p.free <- b
		return
	}
	if p.e.failed.Load() {
		releaseAll(b.reqs, ErrFailed)
		p.free <- b
		return
	}
	if p.failed.Load() {
		// Cluster mode: the log refused an earlier batch, so this state
		// is discarded; the requests go to the partition's next owner.
		releaseAll(b.reqs, errMoved)
		p.free <- b
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
	p.snapBytes += int64(len(b.buf))
	if now := p.e.now(); p.snapshotDue(now) {
		// Only the capture stalls this partition; the snapshotter encodes
		// once the batch is durable.
		b.snap, b.snapSize = p.captureSnapshot(now)
	}
	p.mu.Lock()
	p.last = b
	p.mu.Unlock()
	if p.plog != nil {
		p.plog.Append(b.entries, b.doneFn)
		return
	}
	p.e.opts.Log.Append(b.entries, b.doneFn)
}

// snapshotDue says whether the batch being committed should carry a
// snapshot: after SnapshotEvery inputs, its share of SnapshotBytes of log,
// or SnapshotInterval since the last one, whichever comes first. The first
// two bound what a restart replays; the time one lets the log go. A
// partition whose state is larger than its share waits for
// 1/snapshotLogRatio of its last snapshot's size: writing a 27 MiB state
// for every 2 MiB of log would cost 13 times the log, while a restart
// loads that state anyway and replays half its size more.
func (p *partition) snapshotDue(now int64) bool {
	o := &p.e.opts
	return p.sinceSnap >= o.SnapshotEvery ||
		(p.e.snapShare > 0 && p.snapBytes >= max(p.e.snapShare, p.snapSize.Load()/snapshotLogRatio)) ||
		(o.SnapshotInterval > 0 && p.records > p.snapRecords && now-p.snapAtNs >= int64(o.SnapshotInterval))
}

// captureSnapshot takes a view of the state to encode off the partition
// and restarts the triggers' counts.
func (p *partition) captureSnapshot(now int64) (encode func(dst []byte) []byte, size int) {
	start := time.Now()
	encode, size = p.forkSnapshot(), p.snapshotBufSize()
	p.markSnapshot(now)
	if mt := p.e.opts.Metrics; mt != nil {
		mt.SnapshotForkSeconds.Observe(time.Since(start).Seconds())
	}
	return encode, size
}

// markSnapshot restarts the snapshot triggers' counts from the state now
// (captured, restored or empty).
func (p *partition) markSnapshot(now int64) {
	p.sinceSnap, p.snapBytes, p.snapAtNs, p.snapRecords, p.snapRetryNs = 0, 0, now, p.records, 0
}

// idleSnapshotAt is when the time trigger should snapshot this partition
// even if no batch comes to carry the snapshot: only if it logged records
// since its last one. The crash simulation writes snapshots on the log's
// goroutine only, so it leaves the trigger to committed batches.
func (p *partition) idleSnapshotAt() (int64, bool) {
	iv := p.e.opts.SnapshotInterval
	if iv <= 0 || p.e.opts.inlineSnapshots || p.records == p.snapRecords {
		return 0, false
	}
	return max(p.snapAtNs+int64(iv), p.snapRetryNs), true
}

// snapshotIdle takes the time trigger's snapshot of a partition that
// changed and then went quiet. Its position is the end of the partition's
// newest durable batch, so no batch may be in flight: if one is, it tries
// again shortly (that batch's done has then also queued any snapshot it
// carried, so the snapshotter never sees an older one after this one).
func (p *partition) snapshotIdle() {
	now := p.e.now()
	if at, ok := p.idleSnapshotAt(); !ok || at > now {
		return
	}
	if p.failed.Load() || p.e.failed.Load() {
		// Nothing may be written from a state the log refused; the
		// timer must not fire again at once either.
		p.snapRetryNs = now + int64(p.e.opts.SnapshotInterval)
		return
	}
	p.mu.Lock()
	busy := p.last != nil
	p.mu.Unlock()
	if busy {
		p.snapRetryNs = now + int64(snapshotRetryDelay)
		return
	}
	pos := cmdlog.Position(p.lastEnd.Load())
	encode, size := p.captureSnapshot(now)
	select {
	case p.e.snapCh <- snapJob{p: p, gen: p.gen.Load(), pos: pos, encode: encode, size: size}:
	default:
		p.e.log.Warn("snapshot queue full; skipping a snapshot", "partition", p.id)
	}
}

// SnapshotSizeHinter is optionally implemented by a Machine to estimate
// its snapshot size, so the first snapshot is encoded into one buffer
// rather than grown by copies (which costs a stalled partition ~20x).
type SnapshotSizeHinter interface {
	SnapshotSizeHint() int
}

// snapshotBufSize is a buffer size that fits the next snapshot.
func (p *partition) snapshotBufSize() int {
	last := int(p.snapSize.Load())
	return max(last+last/4, p.snapshotSizeHint())
}

func (p *partition) snapshotSizeHint() int {
	n := 1024 + 64*len(p.outbox) + 64*len(p.timers.byKey)
	for _, m := range p.machines {
		if h, ok := m.(SnapshotSizeHinter); ok {
			n += h.SnapshotSizeHint()
		}
	}
	return n
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
	p.mu.Lock()
	b.durable = true
	if p.last == b {
		p.last = nil
	}
	p.mu.Unlock()
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
			select {
			case p.e.snapCh <- snapJob{p: p, gen: p.gen.Load(), pos: end, encode: b.snap, size: b.snapSize}:
			default:
				// The writer is behind; skip this one; the partition takes
				// another at its next trigger.
				p.e.log.Warn("snapshot queue full; skipping a snapshot", "partition", p.id)
			}
		}
	}
	p.free <- b
}

func (e *Engine) deliverAcks(from int, acks []ackTo) {
	for _, a := range acks {
		e.sendMail(a.src, mail{ack: true, seq: a.seq})
	}
}

func releaseAll(reqs []*Request, err error) {
	for _, r := range reqs {
		if err != nil {
			r.err = err
		}
		r.done <- struct{}{}
	}
}
