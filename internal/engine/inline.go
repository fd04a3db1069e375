package engine

import (
	"fmt"
	"runtime/debug"

	"github.com/surge-run/surge/internal/cmdlog"
)

// Serving a batch on the submitter's goroutine.
//
// A processor that finds its inbox empty parks, and the next request
// would have to wake it: on a lightly loaded partition (batches of one or
// two commands, the common case once cores outnumber the busy partitions)
// that is one goroutine wake-up per request, and with more cores each is
// more likely a futex wake of an idle thread and a hand-off between cores.
// So the processor does not wait on the inbox itself but on kick, and a
// submitter that has queued its request and finds the partition idle
// (its processor parked, runMu free, no batch waiting for the log) builds
// and commits the batch itself, on its own goroutine, exactly as the
// processor would: same fill, same commit,
// same order (runMu serialises every batch of the partition). Its reply
// is still released only when the batch is durable. If the partition is
// busy it kicks the processor, which serves the request after the
// holder: a request queued while the partition was held is never
// stranded. A kick to a processor that is not parked costs no wake-up.
//
// Not in cluster mode (a partition's log and ownership change under the
// processor) nor in the crash simulation (one goroutine does everything
// there).

// inlineApply says whether submitters may serve batches themselves.
func (e *Engine) inlineApply() bool {
	return !e.clusterMode() && !e.opts.inlineSnapshots && !e.opts.noInlineApply
}

// serveOrKick is called by a submitter once its request is in p's inbox,
// with p.subMu held (read) so that Close waits for it.
func (p *partition) serveOrKick(query bool) {
	if !query && p.coalescing() {
		return
	}
	if !p.e.inlineApply() || !p.parked.Load() {
		// A processor at work looks at its inbox before it parks; the
		// kick covers the request that races its parking, and costs no
		// wake-up while it is not parked.
		p.kickProcessor()
		return
	}
	if !p.runMu.TryLock() {
		// Another submitter is serving a batch. It looks at the inbox
		// before it unlocks, but this request may have been queued
		// after it looked and before it unlocked: without a kick it
		// would wait, with the processor parked, for the next request
		// or clock of the partition. The kick costs a wake-up only in
		// this race, and the processor then waits for the lock.
		p.kickProcessor()
		return
	}
	var b *batch
	if !p.inflight.Load() {
		b = p.tryTakeBatch()
	}
	if b == nil {
		// A batch is in flight, so this request waits for the log
		// anyway: the processor's wake-up costs it nothing, and the
		// requests that queue meanwhile share its batch, where serving
		// each inline would make batches of one.
		p.runMu.Unlock()
		p.kickProcessor()
		return
	}
	defer crashOnPanic(p.id)
	b.reset()
	p.fill(b, nil)
	p.commit(b)
	// The processor's clocks were armed for the state before this batch:
	// if it set an earlier timer or made a snapshot due, or left requests
	// queued beyond its share, the processor must look again.
	stale := p.wake.stale(p) || len(p.inbox) > 0
	p.runMu.Unlock()
	if stale {
		p.kickProcessor()
	}
}

// coalesceBelow: while a batch of the partition waits for the log and
// fewer requests than this are queued, a command's submitter does not
// kick the processor; the batch's done does. Past it the processor
// builds at once, during the fsync: waiting for the done with every
// command (up to 256 queued) put the whole batch's apply between one
// commit and the next, and the unary jobs bench's 200 callers, each
// waiting for its reply, fell from 81 % to 73 % of the do-nothing
// server's rate. At 16 a batch is big enough that its append, wake-ups
// and release are a small share of its commands' cost (about four
// batches per commit there), and most of the apply still overlaps the
// fsync.
const coalesceBelow = 16

// coalescing says whether a command just queued may wait for the done of
// the partition's batch in flight to be taken: it would wait for that
// batch's fsync anyway, and so the processor builds one batch per
// commit of the log rather than one per wake-up.
//
// It takes no lock: every submitter of a busy partition calls it, and
// p.mu here was a cache line every core wrote per command (the
// partition's share of lock waits at GOMAXPROCS 8). Nothing is stranded,
// by the order of sequentially consistent atomics: the command is
// queued, coalesced set, then inflight read again; a done stores
// inflight false, then swaps coalesced. If the second read sees a batch
// in flight, the done that ends it (or an earlier one) swaps after the
// set, finds it, and kicks; if it sees none, the caller kicks or serves.
// The inbox's length alone would not do: it is no atomic, and the done's
// read of it is not ordered against this one. coalesced is written only
// when it is not set yet, so while a batch waits the submitters mostly
// read lines no one writes.
func (p *partition) coalescing() bool {
	n := len(p.inbox)
	if n >= coalesceBelow || !p.inflight.Load() {
		return false
	}
	if !p.coalesced.Load() {
		p.coalesced.Store(true)
	}
	// Set before the log's wait is read, as the log sets its wait before
	// its OnWait reads coalesced: one of the two sees the other.
	if p.wouldStartCommit(n) {
		return false
	}
	return p.inflight.Load()
}

// commitWaiter boxes a log's cmdlog.CommitWaiter for an atomic pointer.
type commitWaiter struct{ cmdlog.CommitWaiter }

// wouldStartCommit says whether the partition's n queued requests, as
// log records, would start the group commit the log is waiting to gather
// (with those the other partitions sharing the log hold back, which it
// then releases too). Then they go now, not after the done of the batch
// in flight: the log waits for records the engine holds back, and a
// closed loop of a few callers (one in the batch in flight, the others
// queued behind it) would wait out the log's interval, then the fsync,
// then the interval again for those queued. Nothing changes while the log
// is not waiting (it is writing the batch in flight: that is when
// holding back saves a batch), nor for requests that would not start the
// commit. Queries counted among them append nothing: at worst a batch
// goes early. A request held back just before the log began to wait is
// checked again then (the log's OnWait).
func (p *partition) wouldStartCommit(n int) bool {
	w := p.waiter.Load()
	if w == nil {
		return false
	}
	want := w.Wanted()
	switch {
	case want <= 0:
		return false
	case n >= want:
		return true
	case p.e.clusterMode():
		return false // its log is its own
	case want > maxScanWant:
		return false
	}
	return releaseHeld(p.e.parts, want, n, p)
}

// maxScanWant bounds the commits a submitter counts the other partitions'
// held requests for. The count reads every partition's queue, lines other
// cores write, on every held command while the log waits: on many cores a
// cost per command the engine otherwise avoids. A loop of more callers
// than this spreads over several commits anyway, like a pipeline; the
// log's callback, once per append, still counts them all.
const maxScanWant = 2 * coalesceBelow

// held is how many requests p holds back for the done of its batch in
// flight (coalescing): its queue while it does, else none.
func (p *partition) held() int {
	if !p.coalesced.Load() {
		return 0
	}
	return len(p.inbox)
}

// releaseOnWait is the OnWait callback of log w, which parts share: what
// they hold back goes once it would start the commit w waits to gather.
func releaseOnWait(w cmdlog.CommitWaiter, parts []*partition) func() {
	return func() {
		if want := w.Wanted(); want > 0 {
			releaseHeld(parts, want, 0, nil)
		}
	}
}

// releaseHeld kicks the partitions of parts (but skip) that hold requests
// back if those, and extra more, make the want records a log waits for,
// and says whether they do.
func releaseHeld(parts []*partition, want, extra int, skip *partition) bool {
	total := extra
	for _, q := range parts {
		if q != skip {
			total += q.held()
		}
	}
	if total < want {
		return false
	}
	for _, q := range parts {
		if q != skip && q.held() > 0 {
			q.kickProcessor()
		}
	}
	return true
}

// kickProcessor tells the processor there is work in its inbox. The
// channel holds one kick, so kicks never block and never pile up.
func (p *partition) kickProcessor() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// stale says whether the partition's next timer or idle snapshot is not
// what w is armed for (called with p.runMu held).
func (w *wakeups) stale(p *partition) bool {
	if w == nil {
		return true
	}
	if at, ok := p.timers.next(); ok && at != w.timerAt {
		return true
	}
	if at, ok := p.idleSnapshotAt(); ok && (at != w.snapAt || at <= p.e.now()) {
		return true
	}
	return false
}

// crashOnPanic ends the process when a machine panics in a batch served
// inline, as it does on the processor's goroutine: the partition's state
// is half-applied and its locks held, so the panic must not be recovered
// by the submitter's caller (net/http recovers handler panics) and leave
// the partition hung.
func crashOnPanic(part int) {
	v := recover()
	if v == nil {
		return
	}
	msg := fmt.Sprintf("engine: panic in partition %d (batch served by a submitter): %v\n%s", part, v, debug.Stack())
	go func() { panic(msg) }()
	select {}
}
