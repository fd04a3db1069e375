package wal

import (
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/surge-run/surge/internal/cmdlog"
)

// Replay calls fn for every record from position from up to the End at the
// time of the call, in log order; seal frames are skipped. from must be a
// record boundary (as returned to a DoneFunc or passed to fn), the start of
// the oldest retained segment, or End. Entry data passed to fn points into
// a reused buffer.
func (l *Log) Replay(from cmdlog.Position, fn func(pos cmdlog.Position, e cmdlog.Entry) error) error {
	// Load the end before the segment list: a segment created after this
	// point starts at or after limit, so the list covers [from, limit).
	limit := l.end.Load()
	l.segMu.Lock()
	segs := slices.Clone(l.segs)
	l.segMu.Unlock()

	pos := uint64(from)
	if pos > limit {
		return fmt.Errorf("wal: replay from %d: past the end of the log at %d", pos, limit)
	}
	if pos < segs[0].base {
		return fmt.Errorf("wal: replay from %d: records before %d have been released", pos, segs[0].base)
	}
	i := len(segs) - 1
	for segs[i].base > pos {
		i--
	}
	fr := newFrameReader(1 << 20)
	for ; i < len(segs) && pos < limit; i++ {
		segEnd := limit
		if i+1 < len(segs) {
			segEnd = min(segEnd, segs[i+1].base)
		}
		if pos >= segEnd {
			continue
		}
		var err error
		pos, err = l.replaySegment(fr, segs[i], pos, segEnd, pos == uint64(from), fn)
		if err != nil {
			return err
		}
	}
	return nil
}

// replaySegment replays [pos, segEnd) of s and returns the position reached.
func (l *Log) replaySegment(fr *frameReader, s segment, pos, segEnd uint64, atStart bool,
	fn func(pos cmdlog.Position, e cmdlog.Entry) error) (uint64, error) {
	f, err := l.fs.Open(s.path)
	if err != nil {
		return pos, fmt.Errorf("wal: replay: %w", err)
	}
	defer f.Close()
	fileOff := l.hdrSize + int64(pos-s.base)
	fr.reset(f, l.salt, l.hdrSize, fileOff, l.hdrSize+int64(segEnd-s.base), s.base, nil)
	for {
		at, part, data, err := fr.next()
		if err == io.EOF {
			if fr.pos() != segEnd {
				return fr.pos(), &CorruptionError{File: s.path, Offset: fr.off, Reason: "segment is shorter than the log's end position"}
			}
			return segEnd, nil
		}
		if err != nil {
			var fe *frameError
			if !errors.As(err, &fe) {
				if err == io.ErrUnexpectedEOF {
					return fr.pos(), &CorruptionError{File: s.path, Offset: fr.off, Reason: "segment is shorter than the log's end position"}
				}
				return fr.pos(), fmt.Errorf("wal: replay %s: %w", s.path, err)
			}
			reason := fe.reason
			if atStart && fr.pos() == pos {
				reason += fmt.Sprintf(" (or replay position %d is not a record boundary)", pos)
			}
			return fr.pos(), &CorruptionError{File: s.path, Offset: fe.offset, Reason: reason}
		}
		if err := fn(cmdlog.Position(at), cmdlog.Entry{Partition: uint32(part), Data: data}); err != nil {
			return at, err
		}
	}
}
