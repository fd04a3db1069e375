package engine

import (
	"time"

	"github.com/surge-run/surge/internal/cmdlog"
)

// Snapshots: when a partition takes one (its triggers), how it is encoded
// and written off the partition's goroutine (the snapshotter), and how the
// log then lets go of the records no partition needs (release).

// snapshotDue says whether the batch being committed should carry a
// snapshot: after SnapshotEvery inputs, once the log over all partitions
// reaches SnapshotBytes (logBudgetDue), or SnapshotInterval since the
// last one, whichever comes first. The first two bound what a restart
// replays; the time one lets the log go. For the first two, a partition
// whose state is larger than that log waits for 1/snapshotLogRatio of
// its last snapshot's size (stateOutweighsLog): writing a 27 MiB state
// for every 2 MiB of log would cost 13 times the log, while a restart
// loads that state anyway and replays half its size more. The time
// trigger does not wait: it is what lets the log go.
func (p *partition) snapshotDue(now int64) bool {
	if p.snapOut.Load() {
		return false // the last is still being written: see snapOut
	}
	o := &p.e.opts
	if o.SnapshotInterval > 0 && p.records > p.snapRecords && now-p.snapAtNs >= int64(o.SnapshotInterval) {
		return true
	}
	if p.stateOutweighsLog() {
		return false
	}
	return p.sinceSnap >= o.SnapshotEvery || (o.SnapshotBytes > 0 && p.e.logBudgetDue(p.snapBytes))
}

// stateOutweighsLog says whether the partition's last snapshot is more
// than snapshotLogRatio times the log it has written since. The command
// count waits too: one busy partition (every job of the default queue)
// reaches 100,000 commands in 12.5 MB of log, under the byte trigger's
// 16 MiB, and with a day's finished jobs retained it wrote 14.3 MB, then
// 28.6 MB, then more for every 12.5 MB of log, growing with the state.
func (p *partition) stateOutweighsLog() bool {
	return p.snapBytes < p.snapSize.Load()/snapshotLogRatio
}

// logBudgetDue says whether a partition that logged own bytes since its
// last snapshot should take one for the byte trigger: the partitions
// together have logged SnapshotBytes since theirs, and this one at least
// its share of that (the total over the partitions; the one that logged
// most always has). Judged on the total, one busy partition (every job
// of the default queue) snapshots once per SnapshotBytes of log, where
// judged on its share alone it wrote its whole state every SnapshotBytes /
// Partitions. While the others log, one that went quiet holding most of
// the total keeps it until the time trigger: the total is then at most
// SnapshotBytes × Partitions / (Partitions − 1).
func (e *Engine) logBudgetDue(own int64) bool {
	total := e.unsnapped.Load()
	return total >= e.opts.SnapshotBytes && own*int64(e.opts.Partitions) >= total
}

// logged counts n bytes of log written or replayed for the partition
// since its last snapshot.
func (p *partition) logged(n int64) {
	p.snapBytes += n
	p.e.unsnapped.Add(n)
}

// captureSnapshot takes a view of the state to encode off the partition
// and restarts the triggers' counts.
func (p *partition) captureSnapshot(now int64) (encode func(dst []byte) []byte, size int) {
	start := time.Now()
	encode, size = p.forkSnapshot(), p.snapshotBufSize()
	p.snapOut.Store(true)
	p.markSnapshot(now)
	if mt := p.e.opts.Metrics; mt != nil {
		mt.SnapshotForkSeconds.Observe(time.Since(start).Seconds())
	}
	return encode, size
}

// markSnapshot restarts the snapshot triggers' counts from the state now
// (captured, restored or empty).
func (p *partition) markSnapshot(now int64) {
	p.e.unsnapped.Add(-p.snapBytes)
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
	if p.inflight.Load() || p.snapOut.Load() {
		p.snapRetryNs = now + int64(snapshotRetryDelay)
		return
	}
	pos := cmdlog.Position(p.lastEnd.Load())
	encode, size := p.captureSnapshot(now)
	p.e.queueSnapshot(snapJob{p: p, gen: p.gen.Load(), pos: pos, encode: encode, size: size})
}

// queueSnapshot hands j to the snapshotter; if its queue is full, j is
// given up and the partition takes another at its next trigger.
func (e *Engine) queueSnapshot(j snapJob) {
	select {
	case e.snapCh <- j:
	default:
		j.p.snapOut.Store(false)
		e.log.Warn("snapshot queue full; skipping a snapshot", "partition", j.p.id)
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

type snapJob struct {
	p      *partition
	gen    uint64 // cluster mode: the partition's ownership it belongs to
	pos    cmdlog.Position
	encode func(dst []byte) []byte
	size   int
}

func (e *Engine) snapshotter() {
	defer e.snapWG.Done()
	for j := range e.snapCh {
		e.writeSnapshot(j)
	}
}

func (e *Engine) writeSnapshot(j snapJob) {
	// Written, failed or stale: the partition may capture its next.
	defer j.p.snapOut.Store(false)
	if e.clusterMode() && j.p.gen.Load() != j.gen {
		return // taken while an earlier owner's term; a newer one exists
	}
	start := time.Now()
	data := j.encode(make([]byte, 0, j.size))
	j.p.snapSize.Store(int64(len(data)))
	if m := e.opts.Metrics; m != nil {
		m.SnapshotEncodeSeconds.Observe(time.Since(start).Seconds())
	}
	if err := e.opts.Snapshots.Write(uint32(j.p.id), j.pos, data); err != nil {
		e.log.Error("writing snapshot failed; will retry at the next one", "partition", j.p.id, "err", err)
		return
	}
	if e.clusterMode() {
		// Under ownMu, so that a Release in between cannot leave the
		// next term with this term's position.
		j.p.ownMu.Lock()
		if j.p.gen.Load() == j.gen {
			j.p.snapPos.Store(uint64(j.pos))
		}
		j.p.ownMu.Unlock()
		if m := e.opts.Metrics; m != nil {
			m.Snapshots.Inc()
		}
		return // the log's retention, not the engine, drops old records
	}
	j.p.snapPos.Store(uint64(j.pos))
	if m := e.opts.Metrics; m != nil {
		m.Snapshots.Inc()
	}
	if err := e.release(); err != nil {
		e.log.Error("releasing old log segments failed", "err", err)
	}
}

// release lets the log drop records that no partition needs: a partition
// needs records from its snapshot position on, and only if it applied
// anything since that snapshot.
func (e *Engine) release() error {
	// doneEnd, not Log.End: the log's end moves before the done callbacks
	// that update lastEnd run, and reading it first could make a partition
	// whose batch is durable but not yet done look idle.
	upTo := e.doneEnd.Load()
	for _, p := range e.parts {
		sp := p.snapPos.Load()
		if p.lastEnd.Load() > sp && sp < upTo {
			upTo = sp
		}
	}
	if upTo == 0 {
		return nil
	}
	return e.opts.Log.ReleaseBefore(cmdlog.Position(upTo))
}
