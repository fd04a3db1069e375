// Package wal is Surge's embedded write-ahead log: an append-only sequence
// of segment files holding checksummed record frames, written by a single
// group-committing writer goroutine. It also stores per-partition snapshot
// files. The on-disk format is described in FORMAT.md.
package wal

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/surge-run/surge/internal/cmdlog"
	"github.com/surge-run/surge/internal/groupcommit"
	"github.com/surge-run/surge/internal/vfs"
)

// MaxEntryBytes bounds the Data of one entry. Open treats larger frame
// lengths as corruption, so a garbage length field cannot make recovery
// allocate gigabytes; Append rejects larger entries for the same reason.
const MaxEntryBytes = 16 << 20

const (
	defaultSegmentBytes  = 64 << 20
	defaultQueueLen      = 4096
	defaultMaxBatchBytes = 8 << 20
	defaultSealDelay     = 10 * time.Millisecond
	// maxAppendBytes bounds one Append, and so one write: a frame's back
	// distance to the start of its write is a uint32.
	maxAppendBytes = 1 << 30
	// aheadStep is how far ahead of the log's end the writer keeps the
	// active segment's blocks written (with zeros). An fsync after a write
	// that extends a file must also journal its new size and extents
	// (ext4: about twice the CPU and wall time of an fsync that only
	// overwrites blocks already allocated); a group commit that lands in
	// zeros written ahead overwrites. The zeros go out in the group commit
	// that needs them, covered by its one fsync. See FORMAT.md, "Writing".
	aheadStep = 1 << 20
	// maxZeroTail bounds the all-zero tail past a segment's last frame that
	// Open accepts as written ahead, without a report or a rewrite. The
	// writer leaves at most aheadStep; a torn group commit whose pages
	// never reached the disk adds up to that write's size. A longer zero
	// tail is cut and reported as a torn write, as any other tear.
	maxZeroTail = 2 * aheadStep
)

// zeros is what the writer writes ahead of the log's end.
var zeros [aheadStep]byte

// ErrEntryTooLarge is passed (wrapped) to the DoneFunc of an Append that
// contains an entry larger than MaxEntryBytes. Only that Append fails.
var ErrEntryTooLarge = errors.New("wal: entry too large")

// ErrUnsupportedVersion is wrapped by the error Open and LatestSnapshot
// return for a file written in a format version this build cannot read.
var ErrUnsupportedVersion = errors.New("wal: unsupported format version")

// ErrPartitionsUnknown is returned by Open for a new log when
// Options.Partitions is not set.
var ErrPartitionsUnknown = errors.New("wal: a new log needs its partition count (Options.Partitions)")

// ErrPartitionMismatch is wrapped by the error Open returns when
// Options.Partitions disagrees with the count the log was created with.
var ErrPartitionMismatch = errors.New("wal: partition count mismatch")

// ErrBadPartition is passed (wrapped) to the DoneFunc of an Append with an
// entry for a partition the log does not have. Only that Append fails.
var ErrBadPartition = errors.New("wal: no such partition")

var _ cmdlog.Log = (*Log)(nil)

// Options configures Open. Zero values select the defaults.
type Options struct {
	// Dir holds the segment files; it is created if missing.
	Dir string
	// FS is the file system; nil means the operating system's.
	FS vfs.FS
	// Partitions is the number of partitions, recorded in every segment
	// header. Required for a new log; for an existing one 0 means "as
	// recorded", anything else must match the record.
	Partitions int
	// SealDelay is how long the writer waits, idle after a write, before it
	// writes a seal: an empty frame whose own fsync proves the write before
	// it was durable, so damage to it is reported rather than taken for a
	// torn write. Default 10ms; negative: only Seal and Close seal.
	SealDelay time.Duration
	// SegmentBytes: the writer rolls to a new segment file before the next
	// batch once the active segment holds at least this many record bytes.
	// Default 64 MiB.
	SegmentBytes int64
	// QueueLen bounds the Append calls waiting for the writer; Append blocks
	// when the queue is full (backpressure). Default 4096.
	QueueLen int
	// MaxBatchBytes caps how many bytes the writer gathers into one write and
	// fsync. A single Append larger than this still goes out as one batch.
	// Default 8 MiB.
	MaxBatchBytes int
	// NoSync skips every fsync. Only for tests and benchmarks that say so.
	NoSync bool
	// OnSync, if set, is called by the writer after each batch is written and
	// synced, with the time the write+fsync took and its size.
	OnSync func(d time.Duration, records, bytes int)
	// SyncInterval is how long after a group commit starts the next may
	// wait. Appends that arrive meanwhile share the next fsync: fewer,
	// larger commits for a little latency. A commit starts sooner once as
	// many entries wait as the largest of the last few commits carried
	// (internal/groupcommit). Zero means no wait.
	SyncInterval time.Duration
}

// CorruptionError reports damage to records that were acknowledged, or to
// the structure of the log: anything except a torn write after the last
// acknowledged one, which Open repairs.
type CorruptionError struct {
	File   string
	Offset int64 // byte offset in File (segment header included)
	Reason string
}

func (e *CorruptionError) Error() string {
	return fmt.Sprintf("wal: corrupt log in %s at offset %d: %s. Acknowledged records are damaged, so the server will not start on this log. "+
		"Keep the data directory as it is (copy it aside to inspect it) and restore it from a backup; the records before this offset are intact",
		e.File, e.Offset, e.Reason)
}

// Recovery describes what Open repaired.
type Recovery struct {
	File           string // segment that had a torn tail, or "" if none
	TruncatedBytes int64  // bytes cut from the end of File
}

type request struct {
	entries []cmdlog.Entry
	done    cmdlog.DoneFunc
	seal    chan error // a Seal call, answered once the seal is durable
	err     error      // set by Append when the request is rejected up front
	first   cmdlog.Position
	end     cmdlog.Position
}

type segment struct {
	base   uint64
	path   string
	counts []uint64 // records of each partition before base
}

// Log is the embedded write-ahead log. It implements cmdlog.Log.
type Log struct {
	opts     Options
	recovery Recovery

	// mu orders Append's channel send against Close's close(queue): Append
	// holds it shared while sending, Close exclusively while closing.
	mu     sync.RWMutex
	closed bool
	queue  chan request

	writerDone chan struct{}
	closeOnce  sync.Once
	closeErr   error

	// end is stored only by the writer, after the data is durable.
	end atomic.Uint64

	segMu sync.Mutex
	segs  []segment // oldest first; the last one is the active segment

	fs      vfs.FS
	hdrSize int64  // segment header size, fixed by the partition count
	logID   uint64 // random, fixed at creation; salts every frame checksum
	salt    uint32 // checksum state after logID

	// Owned by the writer goroutine (and by Open before it starts).
	f          vfs.File
	activeSize int64    // record bytes in the active segment
	aheadEnd   int64    // file offset up to which the active segment is written (frames, then zeros)
	counts     []uint64 // records of each partition written so far
	sealed     bool     // the last write was a seal (or nothing was written)
	buf        []byte
	batch      []request
	failErr    error
	lastSync   time.Time
	early      *groupcommit.Early
}

// Open opens or creates the log in opts.Dir, validating every record and
// cutting off a torn write at the end of the last segment.
func Open(opts Options) (*Log, error) {
	if opts.Dir == "" {
		return nil, errors.New("wal: Options.Dir is empty")
	}
	if opts.SegmentBytes <= 0 {
		opts.SegmentBytes = defaultSegmentBytes
	}
	if opts.QueueLen <= 0 {
		opts.QueueLen = defaultQueueLen
	}
	if opts.MaxBatchBytes <= 0 {
		opts.MaxBatchBytes = defaultMaxBatchBytes
	}
	opts.MaxBatchBytes = min(opts.MaxBatchBytes, maxAppendBytes)
	if opts.SealDelay == 0 {
		opts.SealDelay = defaultSealDelay
	}
	if opts.FS == nil {
		opts.FS = vfs.OS
	}
	if err := opts.FS.MkdirAll(opts.Dir); err != nil {
		return nil, fmt.Errorf("wal: %w", err)
	}
	l := &Log{
		opts:       opts,
		fs:         opts.FS,
		queue:      make(chan request, opts.QueueLen),
		writerDone: make(chan struct{}),
		sealed:     true,
		early:      groupcommit.New(),
	}
	if err := l.recover(); err != nil {
		return nil, err
	}
	go l.writer()
	return l, nil
}

// Recovery reports what Open had to repair.
func (l *Log) Recovery() Recovery { return l.recovery }

// Partitions is the partition count recorded in the log.
func (l *Log) Partitions() int { return int(l.hdrSize-segmentHeaderSize(0)) / 8 }

// Start is the position of the oldest record still retained, where a
// reader without a snapshot must begin, and for each partition how many of
// its records lie before it: released, so only a snapshot can supply them.
func (l *Log) Start() (cmdlog.Position, []uint64) {
	l.segMu.Lock()
	defer l.segMu.Unlock()
	return cmdlog.Position(l.segs[0].base), slices.Clone(l.segs[0].counts)
}

// Seal writes a seal frame, unless the last write already was one, and
// returns once it is durable: every write before it is then known to have
// been acknowledged, so later damage to it is reported, never repaired away.
// The writer seals by itself after SealDelay of idleness and on Close.
func (l *Log) Seal() error {
	req := request{seal: make(chan error, 1)}
	l.mu.RLock()
	if l.closed {
		l.mu.RUnlock()
		return cmdlog.ErrClosed
	}
	l.queue <- req
	l.mu.RUnlock()
	return <-req.seal
}

// Append queues entries for the writer. It blocks while the queue is full.
// done is always called from the writer goroutine, in Append order, even
// for rejected appends; the one exception is an Append after Close, whose
// done (with cmdlog.ErrClosed) runs on the caller's goroutine because there
// is no writer left.
func (l *Log) Append(entries []cmdlog.Entry, done cmdlog.DoneFunc) {
	req := request{entries: entries, done: done}
	total := 0
	for i := range entries {
		n := len(entries[i].Data)
		total += frameHeaderSize + n
		if n > MaxEntryBytes {
			req.err = fmt.Errorf("%w: entry %d has %d bytes, limit is %d", ErrEntryTooLarge, i, n, MaxEntryBytes)
			break
		}
		if p := entries[i].Partition; p >= uint32(l.Partitions()) {
			req.err = fmt.Errorf("%w: entry %d is for partition %d of %d", ErrBadPartition, i, p, l.Partitions())
			break
		}
		if total > maxAppendBytes {
			req.err = fmt.Errorf("%w: one append of more than %d bytes", ErrEntryTooLarge, maxAppendBytes)
			break
		}
	}
	l.mu.RLock()
	if l.closed {
		l.mu.RUnlock()
		done(0, 0, cmdlog.ErrClosed)
		return
	}
	l.queue <- req
	l.mu.RUnlock()
	if req.err == nil {
		l.early.Appended(len(entries))
	}
}

// End is the position just past the last durable record.
func (l *Log) End() cmdlog.Position { return cmdlog.Position(l.end.Load()) }

// Wanted and OnWait are cmdlog.CommitWaiter's, for the writer's wait for
// the group commit.
func (l *Log) Wanted() int { return l.early.Wanted() }

func (l *Log) OnWait(fn func()) { l.early.OnWait(fn) }

// Hurry is cmdlog.CommitWaiter's.
func (l *Log) Hurry() { l.early.Hurry() }

// Epoch is constant: an embedded log has exactly one owner.
func (l *Log) Epoch() uint64 { return 1 }

// ReleaseBefore deletes the segments whose records all lie before pos. The
// active segment is never deleted.
func (l *Log) ReleaseBefore(pos cmdlog.Position) error {
	// A segment's records all lie before pos when the next segment starts
	// at or before pos; the active (last) segment has no successor.
	l.segMu.Lock()
	var doomed []string
	for n := 0; n < len(l.segs)-1 && l.segs[n+1].base <= uint64(pos); n++ {
		doomed = append(doomed, l.segs[n].path)
	}
	l.segMu.Unlock()
	// Oldest first, each removal made durable before the next: a crash
	// then leaves the retained segments contiguous (only a prefix can be
	// gone), never a gap that would read as a lost segment. Releases are
	// rare (after snapshots), so the extra directory syncs cost little.
	for _, path := range doomed {
		err := l.fs.Remove(path)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("wal: release: %w", err)
		}
		if !l.opts.NoSync {
			if err := l.fs.SyncDir(l.opts.Dir); err != nil {
				return fmt.Errorf("wal: release: sync dir: %w", err)
			}
		}
		l.segMu.Lock()
		l.segs = l.segs[1:]
		l.segMu.Unlock()
	}
	return nil
}

// Close stops accepting appends, writes and syncs everything already
// queued, calls its dones, and closes the files. It returns the error that
// failed the log, if any. Calling it again returns the same result.
func (l *Log) Close() error {
	l.closeOnce.Do(func() {
		l.mu.Lock()
		l.closed = true
		close(l.queue)
		l.mu.Unlock()
		<-l.writerDone
	})
	return l.closeErr
}

func (l *Log) writer() {
	defer close(l.writerDone)
	idle := time.NewTimer(time.Hour)
	idle.Stop()
	for {
		var req request
		var ok bool
		if l.sealed || l.failErr != nil || l.opts.SealDelay < 0 {
			req, ok = <-l.queue
		} else {
			idle.Reset(l.opts.SealDelay)
			select {
			case req, ok = <-l.queue:
				idle.Stop()
			case <-idle.C:
				l.writeSeal()
				continue
			}
		}
		if !ok {
			break
		}
		l.batch = append(l.batch[:0], req)
		size, count := requestBytes(&req), requestEntries(&req)
		l.early.Taken(count)
		open := true
		if d := l.opts.SyncInterval - time.Since(l.lastSync); d > 0 {
			l.early.Wait(d, count)
		}
	gather:
		for size < l.opts.MaxBatchBytes {
			select {
			case r, ok := <-l.queue:
				if !ok {
					open = false
					break gather
				}
				l.batch = append(l.batch, r)
				c := requestEntries(&r)
				l.early.Taken(c)
				size += requestBytes(&r)
				count += c
			default:
				break gather
			}
		}
		l.lastSync = time.Now()
		l.early.Committed(count)
		l.commit(l.batch)
		// Drop references to callers' data and callbacks.
		clear(l.batch)
		if !open {
			break
		}
	}
	l.writeSeal()
	err := l.failErr
	if err == nil && !l.opts.NoSync {
		err = l.f.Sync()
	}
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	if err != nil && l.failErr == nil {
		err = fmt.Errorf("wal: close: %w", err)
	}
	l.closeErr = err
}

// writeSeal writes and syncs a seal frame as a write of its own, unless the
// last write was one.
func (l *Log) writeSeal() {
	if l.sealed || l.failErr != nil {
		return
	}
	if l.activeSize >= l.opts.SegmentBytes {
		// The roll's fsync before the next segment proves everything in
		// this one; the new segment's first write needs no seal.
		if err := l.roll(); err != nil {
			l.failErr = fmt.Errorf("wal: roll segment: %w", err)
		}
		l.sealed = true
		return
	}
	base := l.end.Load()
	l.buf = appendFrame(l.buf[:0], l.salt, base, 0, sealPartition, nil)
	if err := l.write(l.buf); err != nil {
		l.failErr = err
		return
	}
	l.end.Store(base + frameHeaderSize)
	l.sealed = true
}

// write writes buf at the end of the active segment and syncs it.
func (l *Log) write(buf []byte) error {
	off := l.hdrSize + l.activeSize
	_, err := l.f.WriteAt(buf, off)
	if err == nil {
		l.writeAhead(off + int64(len(buf)))
	}
	if err == nil && !l.opts.NoSync {
		err = l.f.Sync()
	}
	if err != nil {
		// After a failed write or fsync the file's contents are unknown
		// (the kernel may have dropped dirty pages), so nothing more may
		// be acknowledged; Open will sort out the tail.
		return fmt.Errorf("wal: write %s: %w", l.activePath(), err)
	}
	l.activeSize += int64(len(buf))
	return nil
}

// writeAhead is called after a write that ends at file offset end. When
// that reaches the end of the blocks already written, it writes zeros from
// end to the next aheadStep boundary of the file past it, for the write's
// fsync to cover, so that the next group commits overwrite blocks this one
// allocated (see aheadStep); never past the segment's size limit, where the
// writer rolls and the zeros would never be overwritten. The zeros are an
// optimisation: if writing them fails (a full disk) the commit goes on,
// the frames were written, and the fsync reports any error of the file.
func (l *Log) writeAhead(end int64) {
	ahead := min((end/aheadStep+1)*aheadStep, l.hdrSize+l.opts.SegmentBytes)
	if end < l.aheadEnd || ahead <= end {
		return
	}
	if _, err := l.f.WriteAt(zeros[:ahead-end], end); err == nil {
		l.aheadEnd = ahead
	}
}

func (l *Log) activePath() string {
	l.segMu.Lock()
	defer l.segMu.Unlock()
	return l.segs[len(l.segs)-1].path
}

// requestEntries is what an append counts for the early commit: its
// entries, as Append counted them (a refused append or a seal: none).
func requestEntries(r *request) int {
	if r.err != nil || r.seal != nil {
		return 0
	}
	return len(r.entries)
}

func requestBytes(r *request) int {
	if r.err != nil || r.seal != nil {
		return 0
	}
	n := 0
	for i := range r.entries {
		n += frameHeaderSize + len(r.entries[i].Data)
	}
	return n
}

// commit writes one batch with a single write and a single fsync, then
// reports to every request in order.
func (l *Log) commit(batch []request) {
	if l.failErr == nil && l.activeSize >= l.opts.SegmentBytes {
		if err := l.roll(); err != nil {
			l.failErr = fmt.Errorf("wal: roll segment: %w", err)
		}
	}
	if l.failErr != nil {
		l.failBatch(batch)
		return
	}

	base := l.end.Load()
	buf := l.buf[:0]
	records := 0
	seal := false
	for i := range batch {
		r := &batch[i]
		if r.seal != nil {
			seal = true
			continue
		}
		if r.err != nil {
			continue
		}
		r.first = cmdlog.Position(base + uint64(len(buf)))
		for j := range r.entries {
			e := &r.entries[j]
			buf = appendFrame(buf, l.salt, base+uint64(len(buf)), uint32(len(buf)), uint16(e.Partition), e.Data)
			l.counts[e.Partition]++
		}
		r.end = cmdlog.Position(base + uint64(len(buf)))
		records += len(r.entries)
	}
	// Keep the grown buffer for the next batch, unless one unusually large
	// append blew it up far past the normal batch size.
	if cap(buf) <= 2*l.opts.MaxBatchBytes+MaxEntryBytes {
		l.buf = buf
	} else {
		l.buf = nil
	}

	if len(buf) > 0 {
		start := time.Now()
		if err := l.write(buf); err != nil {
			l.failErr = err
			l.failBatch(batch)
			return
		}
		l.sealed = false
		l.end.Store(base + uint64(len(buf)))
		if l.opts.OnSync != nil {
			l.opts.OnSync(time.Since(start), records, len(buf))
		}
	}
	for i := range batch {
		r := &batch[i]
		if r.seal == nil {
			r.done(r.first, r.end, r.err)
		}
	}
	if seal {
		l.writeSeal()
		for i := range batch {
			if r := &batch[i]; r.seal != nil {
				r.seal <- l.failErr
			}
		}
	}
}

// failBatch reports the log's failure (or a request's own error) to every
// request of the batch, in order.
func (l *Log) failBatch(batch []request) {
	for i := range batch {
		r := &batch[i]
		if r.seal != nil {
			r.seal <- l.failErr
			continue
		}
		if r.err == nil {
			r.err = l.failErr
		}
		r.done(0, 0, r.err)
	}
}

// roll starts a new segment at the current end. Every batch already ends
// with an fsync, so the extra one here costs nothing in the common case; it
// is the explicit guarantee that a non-last segment is complete on disk,
// which is what lets Open treat any damage in it as corruption.
func (l *Log) roll() error {
	if !l.opts.NoSync {
		if err := l.f.Sync(); err != nil {
			return err
		}
	}
	base := l.end.Load()
	counts := slices.Clone(l.counts)
	f, path, err := createSegment(l.fs, l.opts.Dir, base, l.logID, counts, !l.opts.NoSync)
	if err != nil {
		return err
	}
	old := l.f
	l.f = f
	l.activeSize = 0
	l.aheadEnd = l.hdrSize
	l.segMu.Lock()
	l.segs = append(l.segs, segment{base: base, path: path, counts: counts})
	l.segMu.Unlock()
	return old.Close()
}
