package engine

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/surge-run/surge/internal/cmdlog"
)

// MissingRecordsError is returned by Open when a partition's snapshot does
// not cover the records the log no longer holds: starting would silently
// lose them.
type MissingRecordsError struct {
	Partition int
	Released  uint64          // the partition's records before the log's start
	Covered   uint64          // records its snapshot covers (0: no snapshot)
	Snapshot  bool            // whether a snapshot was found at all
	LogStart  cmdlog.Position // position of the oldest retained record
	Store     string          // where snapshots are kept, if the store says
}

func (e *MissingRecordsError) Error() string {
	have := "it has no snapshot"
	if e.Snapshot {
		have = fmt.Sprintf("its newest snapshot covers only %d", e.Covered)
	}
	where := ""
	if e.Store != "" {
		where = " in " + e.Store
	}
	return fmt.Sprintf("engine: partition %d: %d of its records lie before the log's start (position %d) and only a snapshot can supply them, but %s%s. "+
		"Starting would lose them, so the server will not start: restore the snapshot files of partition %d (snap-%05d-*.snap) from a backup; keep the data directory as it is",
		e.Partition, e.Released, e.LogStart, have, where, e.Partition, e.Partition)
}

// recover loads each partition's snapshot, checks that the snapshots and
// the log together hold every record, replays the log tail through the
// same apply path the processors use, and re-sends every message that is
// not known to be acknowledged (receivers drop duplicates).
func (e *Engine) recover() error {
	began := time.Now()
	start, released := e.opts.Log.Start()
	if len(released) != len(e.parts) {
		return fmt.Errorf("engine: the log was created with %d partitions, not %d; keys would move to other partitions. Start with the partition count the data was written with",
			len(released), len(e.parts))
	}
	end := uint64(e.opts.Log.End())
	from, err := e.restoreSnapshots(start, released, end)
	if err != nil {
		return err
	}
	// A partition idle since its snapshot may hold one older than the
	// log's start; it has no records in between (restoreSnapshots
	// checked), so starting at the log's start is exact.
	from = max(from, uint64(start))
	replayed, err := e.replayLog(from)
	if err != nil {
		return err
	}
	e.doneEnd.Store(end)
	acked := e.dropDelivered()
	e.log.Info("recovered", "partitions", len(e.parts), "replayed_records", replayed, "from", from,
		"took", time.Since(began).Round(time.Millisecond), "delivered_messages_dropped", acked)
	for _, p := range e.parts {
		seqs := slices.Sorted(maps.Keys(p.outbox))
		for _, s := range seqs {
			m := p.outbox[s]
			e.parts[m.target].mail.push(m.mail(p.id))
		}
	}
	return nil
}

// restoreSnapshots loads each partition's latest snapshot and checks that
// it and the log together hold every record the log has released (a
// snapshot past the log's end means acknowledged records are missing). It
// returns the oldest position a snapshot covers, where replay starts.
func (e *Engine) restoreSnapshots(start cmdlog.Position, released []uint64, end uint64) (uint64, error) {
	store := ""
	if s, ok := e.opts.Snapshots.(fmt.Stringer); ok {
		store = s.String()
	}
	from := uint64(1<<64 - 1)
	for _, p := range e.parts {
		pos, data, ok, err := e.opts.Snapshots.Latest(uint32(p.id))
		if err != nil {
			return 0, fmt.Errorf("engine: reading snapshot of partition %d: %w", p.id, err)
		}
		if ok {
			if err := p.restoreSnapshot(data); err != nil {
				return 0, err
			}
			p.snapPos.Store(uint64(pos))
			p.snapSize.Store(int64(len(data)))
			if uint64(pos) > end {
				return 0, fmt.Errorf("engine: partition %d: its snapshot covers the log up to position %d, but the log ends at %d: acknowledged records are missing from the log. "+
					"Restore the data directory from a backup; keep it as it is", p.id, pos, end)
			}
		}
		if p.records < released[p.id] {
			return 0, &MissingRecordsError{Partition: p.id, Released: released[p.id], Covered: p.records, Snapshot: ok, LogStart: start, Store: store}
		}
		from = min(from, uint64(pos))
		p.markSnapshot(e.now())
	}
	return from, nil
}

// replayLog applies the log from position from on, each record to its
// partition unless that partition's snapshot already holds it, and
// returns how many records it applied.
func (e *Engine) replayLog(from uint64) (int, error) {
	var replayed int
	err := e.opts.Log.Replay(cmdlog.Position(from), func(pos cmdlog.Position, en cmdlog.Entry) error {
		if int(en.Partition) >= len(e.parts) {
			return fmt.Errorf("engine: the log holds records of partition %d but the engine has %d partitions; start with the partition count the data directory was created with", en.Partition, len(e.parts))
		}
		p := e.parts[en.Partition]
		if uint64(pos) < p.snapPos.Load() {
			return nil
		}
		p.records++
		p.logged(int64(len(en.Data)))
		if err := p.replay(en.Data); err != nil {
			return fmt.Errorf("engine: replaying record at position %d: %w", pos, err)
		}
		p.lastEnd.Store(uint64(pos) + 1)
		replayed++
		return nil
	})
	return replayed, err
}

// dropDelivered removes from the recovered outboxes every message its
// receiver's recovered state already holds (its high-water mark for the
// sender is at or past it): the receiver applied it in a durable record,
// and only the acknowledgement, which is never logged, was lost with the
// process. Replay rebuilds the outbox of every message sent since the
// sender's snapshot, so after a kill -9 re-sending them all would flood
// the mailboxes with duplicates that receivers only drop and acknowledge.
// Every partition is local and recovered here, so their marks are exact.
// The outbox is built anew: a map keeps the size it once had.
func (e *Engine) dropDelivered() int {
	n := 0
	for _, p := range e.parts {
		kept := make(map[uint64]*outMsg)
		for seq, m := range p.outbox {
			if seq > e.parts[m.target].hwm[uint32(p.id)] {
				kept[seq] = m
			}
		}
		n += len(p.outbox) - len(kept)
		p.outbox = kept
	}
	return n
}
