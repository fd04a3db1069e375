package wal

import (
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/surge-run/surge/internal/cmdlog"
)

// Replay calls fn for every record from position from up to the End at the
// time of the call, in log order. from must be a record boundary (as
// returned to a DoneFunc or passed to fn), the start of the oldest retained
// segment, or End. Entry data passed to fn points into a reused buffer.
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
		pos, err = replaySegment(fr, segs[i], pos, segEnd, pos == uint64(from), fn)
		if err != nil {
			return err
		}
	}
	return nil
}

// replaySegment replays [pos, segEnd) of s and returns the position reached.
func replaySegment(fr *frameReader, s segment, pos, segEnd uint64, atStart bool,
	fn func(pos cmdlog.Position, e cmdlog.Entry) error) (uint64, error) {
	f, err := os.Open(s.path)
	if err != nil {
		return pos, fmt.Errorf("wal: replay: %w", err)
	}
	defer f.Close()
	fileOff := segmentHeaderSize + int64(pos-s.base)
	fr.reset(io.NewSectionReader(f, fileOff, int64(segEnd-pos)), fileOff)
	for pos < segEnd {
		part, data, err := fr.next()
		if err != nil {
			switch e := err.(type) {
			case *frameError:
				reason := e.reason
				if atStart {
					reason += fmt.Sprintf(" (or replay position %d is not a record boundary)", pos)
				}
				return pos, &CorruptionError{File: s.path, Offset: e.offset, Reason: reason}
			default:
				if err == io.EOF {
					return pos, &CorruptionError{File: s.path, Offset: fr.off, Reason: "segment is shorter than the log's end position"}
				}
				return pos, fmt.Errorf("wal: replay %s: %w", s.path, err)
			}
		}
		if err := fn(cmdlog.Position(pos), cmdlog.Entry{Partition: part, Data: data}); err != nil {
			return pos, err
		}
		pos += uint64(frameHeaderSize + len(data))
		atStart = false
	}
	return pos, nil
}
