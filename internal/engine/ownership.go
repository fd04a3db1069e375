package engine

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/surge-run/surge/internal/cmdlog"
)

// Acquire makes this node serve part: it restores the partition's latest
// snapshot, replays lg from the snapshot's position, re-sends the messages
// the partition sent that are not known to be received, and starts its
// processor. lg must be newly opened (so that earlier owners are fenced).
// On error the partition stays unserved and lg is closed.
func (e *Engine) Acquire(part int, lg cmdlog.PartitionLog) (err error) {
	if !e.clusterMode() {
		return errors.New("engine: Acquire is for cluster mode")
	}
	if part < 0 || part >= len(e.parts) {
		return fmt.Errorf("engine: partition %d out of range [0,%d)", part, len(e.parts))
	}
	p := e.parts[part]
	p.ownMu.Lock()
	defer p.ownMu.Unlock()
	if p.plog != nil {
		lg.Close()
		return fmt.Errorf("engine: partition %d is already served here", part)
	}
	e.mu.RLock()
	closed := e.closed
	e.mu.RUnlock()
	if closed {
		lg.Close()
		return ErrClosed
	}
	defer func() {
		if err != nil {
			lg.Close()
			p.resetState()
		}
	}()
	start := time.Now()
	pos, replayed, err := p.recoverFrom(lg)
	if err != nil {
		return err
	}
	p.serve(lg)
	e.log.Info("partition acquired", "partition", part, "snapshot_pos", uint64(pos), "replayed_records", replayed, "took", time.Since(start).Round(time.Millisecond))
	if m := e.opts.Metrics; m != nil {
		m.owned.WithLabelValues(partLabel(part)).Set(1)
		m.acquired.WithLabelValues(partLabel(part)).Inc()
		m.acquireSeconds.Observe(time.Since(start).Seconds())
	}
	return nil
}

// recoverFrom restores the partition from its latest snapshot and the
// records of lg after it, and says where the snapshot ends and how many
// records it replayed. It refuses a log whose retention deleted records
// no snapshot holds.
func (p *partition) recoverFrom(lg cmdlog.PartitionLog) (pos cmdlog.Position, replayed int, err error) {
	e, part := p.e, p.id
	pos, data, ok, err := e.opts.Snapshots.Latest(uint32(part))
	if err != nil {
		return 0, 0, fmt.Errorf("engine: reading snapshot of partition %d: %w", part, err)
	}
	if ok {
		if err := p.restoreSnapshot(data); err != nil {
			return 0, 0, err
		}
		p.snapPos.Store(uint64(pos))
		p.lastEnd.Store(uint64(pos))
		p.snapSize.Store(int64(len(data)))
	}
	if logStart := lg.Start(); uint64(pos) < uint64(logStart) {
		have := "it has no snapshot"
		if ok {
			have = fmt.Sprintf("its newest snapshot covers only up to %d", pos)
		}
		return 0, 0, fmt.Errorf("engine: partition %d: the log starts at position %d (older records were deleted by retention) but %s; serving it would lose those records. Keep the log's retention longer than the snapshot interval, and restore the snapshot topic if it was lost",
			part, logStart, have)
	}
	p.markSnapshot(e.now())
	err = lg.Replay(pos, func(at cmdlog.Position, en cmdlog.Entry) error {
		p.records++
		p.logged(int64(len(en.Data)))
		if err := p.replay(en.Data); err != nil {
			return fmt.Errorf("engine: replaying partition %d at position %d: %w", part, at, err)
		}
		p.lastEnd.Store(uint64(at) + 1)
		replayed++
		return nil
	})
	return pos, replayed, err
}

// serve starts a new term of ownership on lg: the processor runs, and
// everything the partition sent that is not known to be received goes
// out again (receivers drop what they already applied).
func (p *partition) serve(lg cmdlog.PartitionLog) {
	e := p.e
	p.plog = lg
	if w, ok := lg.(cmdlog.CommitWaiter); ok {
		// The partition's batches alone share this log's commits.
		w.OnWait(releaseOnWait(w, []*partition{p}))
		p.waiter.Store(&commitWaiter{w})
	}
	p.failed.Store(false)
	p.gen.Add(1)
	p.stopCh = make(chan struct{})
	p.stopped = make(chan struct{})
	p.serving.Store(true)
	for _, s := range slices.Sorted(maps.Keys(p.outbox)) {
		m := p.outbox[s]
		m.sentNs.Store(e.mono())
		e.sendMail(m.target, m.mail(p.id))
	}
	e.wg.Add(1)
	go p.run()
}

// Release stops serving part: requests still queued are passed on to the
// new owner, batches already appended finish, a snapshot is written if the
// partition changed since the last one (so the next owner replays little),
// and the log is closed. Releasing a partition not served here does
// nothing.
func (e *Engine) Release(part int) error {
	if !e.clusterMode() || part < 0 || part >= len(e.parts) {
		return nil
	}
	return e.parts[part].release()
}

// Owned lists the partitions this node serves.
func (e *Engine) Owned() []int {
	var out []int
	for _, p := range e.parts {
		if p.serving.Load() {
			out = append(out, p.id)
		}
	}
	return out
}

// Position is how far the partition's state reaches into its log: the
// position just past the last record it applied (0 when not served here).
func (e *Engine) Position(part int) uint64 {
	if !e.Serves(part) {
		return 0
	}
	return e.parts[part].lastEnd.Load()
}

// Serves reports whether this node serves part.
func (e *Engine) Serves(part int) bool {
	return part >= 0 && part < len(e.parts) && e.parts[part].serving.Load()
}

func (p *partition) release() error {
	p.ownMu.Lock()
	defer p.ownMu.Unlock()
	if p.plog == nil {
		return nil
	}
	e := p.e
	p.serving.Store(false)
	// Submitters hold subMu while they put a request in the inbox; once
	// this lock is taken, every request that saw the partition served is
	// in the inbox, and the ones after will not enter it.
	p.subMu.Lock()
	//lint:ignore SA2001 the empty section is the barrier: it waits out every submitter inside.
	p.subMu.Unlock()
	if w := p.waiter.Load(); w != nil {
		w.Hurry() // nothing more comes to share the commit in flight
	}
	close(p.stopCh)
	<-p.stopped
	// The processor answered what it took; what is still queued was never
	// applied and goes on to the new owner.
	for {
		select {
		case r := <-p.inbox:
			r.err = errMoved
			r.done <- struct{}{}
			continue
		default:
		}
		break
	}
	var err error
	if !p.failed.Load() && p.lastEnd.Load() > p.snapPos.Load() {
		end := cmdlog.Position(p.lastEnd.Load())
		data := p.appendSnapshot(make([]byte, 0, p.snapshotBufSize()))
		if err = e.opts.Snapshots.Write(uint32(p.id), end, data); err != nil {
			e.log.Error("writing the hand-over snapshot failed; the next owner replays from the previous one", "partition", p.id, "err", err)
		}
	}
	if cerr := p.plog.Close(); cerr != nil && err == nil && !p.failed.Load() {
		err = cerr
	}
	p.plog = nil
	p.resetState()
	e.log.Info("partition released", "partition", p.id)
	if m := e.opts.Metrics; m != nil {
		m.owned.WithLabelValues(partLabel(p.id)).Set(0)
	}
	return err
}

// resetState empties the partition: a node that serves it again rebuilds
// it from the snapshot and the log.
func (p *partition) resetState() {
	for wid, w := range p.e.workloads {
		p.machines[wid] = w.NewMachine(p.id)
	}
	p.outSeq = 0
	p.outbox = make(map[uint64]*outMsg)
	p.lastTo = make(map[int]uint64)
	p.hwm = make(map[uint32]uint64)
	p.timers = newTimerTable()
	p.timerTraces = nil
	p.records = 0
	p.markSnapshot(0)
	p.lastEnd.Store(0)
	p.snapPos.Store(0)
	p.mu.Lock()
	p.last = nil
	p.inflight.Store(false)
	p.mu.Unlock()
	p.mail.reset()
}

// lost is called on the log's completion goroutine when the partition's
// log failed: its state may now be ahead of the log, so it must stop
// serving at once; releasing waits for the batches in flight, so it runs
// on a goroutine of its own.
func (p *partition) lost(err error) {
	if !p.failed.CompareAndSwap(false, true) {
		return
	}
	p.e.log.Warn("partition log failed; no longer serving the partition", "partition", p.id, "err", err)
	go func() {
		p.release()
		if fn := p.e.opts.Cluster.OnLost; fn != nil {
			fn(p.id, err)
		}
	}()
}

// partitionErr is what a request learns when its partition's log failed
// under it in cluster mode.
func partitionErr(err error) error {
	if errors.Is(err, cmdlog.ErrFenced) {
		// Not appended: the new owner never saw it, so it goes there.
		return errMoved
	}
	return fmt.Errorf("%w: %v", ErrOutcomeUnknown, err)
}
