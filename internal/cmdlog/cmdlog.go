// Package cmdlog defines the command logs the engine writes to and replays
// from, so that the engine imports neither implementation. Log, one log
// for every partition of a node, is implemented by the embedded write-ahead
// log (internal/wal); PartitionLog, one log per partition whose opener
// becomes its only writer, by cluster mode's log on Kafka
// (internal/kafkalog).
package cmdlog

import "errors"

// Position is a place in the log. It only grows. For the embedded log it is
// the byte offset of a record from the start of the log (segment headers
// excluded), shared by all partitions of the node.
type Position uint64

// Entry is one record: a command addressed to one partition. Data is opaque
// to the log.
type Entry struct {
	Partition uint32
	Data      []byte
}

// MaxEntryBytes is the largest Entry.Data every Log implementation takes.
// The engine refuses, alone and before applying it, a command whose entry
// would be larger (engine.ErrTooLarge), and the API edge refuses any request
// whose command could encode larger (413 / RESOURCE_EXHAUSTED), so that a
// legal request never reaches a log that cannot hold it. The embedded log
// accepts more (wal.MaxEntryBytes); the Kafka log's topics are created
// with a max.message.bytes that fits it.
const MaxEntryBytes = 10 << 20

// DoneFunc is called once the entries of one Append are durable (err == nil)
// or can never be (err != nil). first is the position of the first entry,
// end the position just past the last one. Calls happen in Append order,
// from a single goroutine, and must not block for long.
type DoneFunc func(first, end Position, err error)

// Log is what the engine needs from a command log.
type Log interface {
	// Append queues entries to be written. It may block when the log's
	// queue is full (backpressure). The caller must not modify the entries'
	// Data until done has been called.
	Append(entries []Entry, done DoneFunc)
	// Replay calls fn for every record at or after from, in log order. Data
	// passed to fn is only valid during the call.
	Replay(from Position, fn func(pos Position, e Entry) error) error
	// End is the position just past the last durable record.
	End() Position
	// Start is the position of the oldest retained record and, for each
	// partition, how many of its records lie before it: records that were
	// released, so that only the partition's snapshot can supply them. The
	// length of the slice is the partition count the log was created with.
	Start() (Position, []uint64)
	// Epoch identifies the current owner of the log. The embedded log has
	// one owner, the process holding its data directory's lock, so its
	// epoch never changes; cluster mode fences an earlier owner through
	// PartitionLog instead (ErrFenced), not through an epoch.
	Epoch() uint64
	// ReleaseBefore tells the log that no reader needs records before pos
	// any more (every snapshot covers them), so it may delete them.
	ReleaseBefore(pos Position) error
	// Close writes and syncs whatever is queued, then closes.
	Close() error
}

// ErrClosed is returned (or passed to DoneFunc) after Close.
var ErrClosed = errors.New("cmdlog: log is closed")

// PartitionLog is one partition's command log in cluster mode, where each
// partition has a log of its own (a Kafka topic partition) and one node at
// a time owns it. Opening it makes the opener the owner and fences every
// earlier one: from then on, an earlier owner's appends fail with
// ErrFenced and none of them becomes readable after the new owner's.
// Positions are the partition's own offsets; End positions passed to
// DoneFunc are where a replay that should start after those entries begins.
type PartitionLog interface {
	// Append is Log.Append for one partition. done gets ErrFenced once
	// another node has opened the log: the entries are not durable and
	// never will be, and the caller must stop using the log.
	Append(entries []Entry, done DoneFunc)
	// Replay calls fn, in order, for every durable record at or after
	// from, up to everything that was durable when the log was opened
	// (every earlier owner's acknowledged appends).
	Replay(from Position, fn func(pos Position, e Entry) error) error
	// Start is the oldest position still retained: a snapshot must cover
	// everything before it, or the partition cannot be restored.
	Start() Position
	// Close stops the log; appends still queued get done(ErrClosed) unless
	// they were already durable.
	Close() error
}

// CommitWaiter is a log whose writer waits to gather appends into a group
// commit. Wanted is how many more entries would end that wait and start
// the commit now (0 while it is not waiting); OnWait sets fn, called when
// the writer starts such a wait and when an append during it leaves it
// short (fn must not block); Hurry
// ends the wait and every later one, for an owner that is closing and
// waits for its appends in flight.
type CommitWaiter interface {
	Wanted() int
	OnWait(fn func())
	Hurry()
}

// ErrFenced is passed to DoneFunc when another node has taken over the
// partition: the append did not happen.
var ErrFenced = errors.New("cmdlog: another node has taken over this partition; the append was not made")
