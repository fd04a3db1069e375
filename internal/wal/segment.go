package wal

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/surge-run/surge/internal/vfs"
)

// Segment header, version 2:
//
//	magic(8) version(4) base(8) partitions(4) logID(8) counts(8 × partitions) crc(4)
//
// logID is random, drawn when the log is created and repeated in every
// segment; it salts every frame checksum, so that nobody outside the
// process can build bytes that pass for a frame (see frameAt).
// counts[p] is how many records of partition p precede base: what a
// partition's snapshot must cover once the segments before this one are
// released. The version sits right after the magic in every format version
// so that any build can name the version it does not understand.
const (
	segmentMagic   = "SURGEWAL"
	segmentVersion = 2
	segmentExt     = ".wal"
	tmpExt         = ".tmp"
	// MaxPartitions bounds the partition count a log accepts (and so the
	// size of a segment header).
	MaxPartitions = 1 << 12
)

func segmentHeaderSize(partitions int) int64 { return 36 + 8*int64(partitions) }

const countsOffset = 32

// Frame, version 2 (16-byte header, then data):
//
//	length(4) back(4) partition(2) check(2) crc(4) data(length)
//
// back is the distance from the start of the group commit (the one write
// and fsync) the frame belongs to. The writer starts a write only after
// the previous one was fsynced, so a valid frame whose write began at S
// proves that every byte before S was durable (acknowledged). check is the
// low 16 bits of CRC-32C over the frame's position and bytes 0..10, a cheap
// filter when scanning for frames byte by byte; crc is CRC-32C over the
// position, bytes 0..12 and the data. Both are salted with the position, so
// a frame is valid only where it was written: a frame-shaped byte run a
// client put into its own data, or a stale frame, does not pass. The salt
// also covers the log's random id, so even a client that could guess
// where its bytes will land cannot forge a frame there.
const (
	frameHeaderSize = 16
	// sealPartition marks a seal frame: no data, a write of its own,
	// written when the log falls idle and on Close, so that the last
	// acknowledged write is followed by proof that it was durable.
	sealPartition = 0xffff
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func segmentName(base uint64) string { return fmt.Sprintf("%020d%s", base, segmentExt) }

func parseSegmentName(name string) (uint64, bool) {
	s, ok := strings.CutSuffix(name, segmentExt)
	if !ok || len(s) != 20 {
		return 0, false
	}
	base, err := strconv.ParseUint(s, 10, 64)
	return base, err == nil
}

// logSalt is the checksum state after the log's id; posSalt continues it
// with a frame's position.
func logSalt(logID uint64) uint32 {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], logID)
	return crc32.Update(0, castagnoli, b[:])
}

// posSalt is crc32.Update(salt, castagnoli, pos as 8 little-endian bytes),
// done bytewise because handing crc32 an 8-byte array made it escape: one
// allocation per frame on the write path.
func posSalt(salt uint32, pos uint64) uint32 {
	crc := ^salt
	for i := range 8 {
		crc = castagnoli[byte(crc)^byte(pos>>(8*i))] ^ (crc >> 8)
	}
	return ^crc
}

func headerCheck(salt uint32, h []byte) uint16 {
	return uint16(crc32.Update(salt, castagnoli, h[:10]))
}

// appendFrame appends the frame of data at log position pos, back bytes
// after the start of its write.
func appendFrame(buf []byte, logSalt uint32, pos uint64, back uint32, partition uint16, data []byte) []byte {
	off := len(buf)
	buf = slices.Grow(buf, frameHeaderSize+len(data))
	buf = buf[:off+frameHeaderSize]
	h := buf[off:]
	binary.LittleEndian.PutUint32(h, uint32(len(data)))
	binary.LittleEndian.PutUint32(h[4:], back)
	binary.LittleEndian.PutUint16(h[8:], partition)
	salt := posSalt(logSalt, pos)
	binary.LittleEndian.PutUint16(h[10:], headerCheck(salt, h))
	crc := crc32.Update(salt, castagnoli, h[:12])
	buf = append(buf, data...)
	binary.LittleEndian.PutUint32(buf[off+12:], crc32.Update(crc, castagnoli, data))
	return buf
}

// frameAt checks whether b starts with a complete, valid frame written at
// position pos, and returns its partition, back distance and data.
func frameAt(b []byte, logSalt uint32, pos uint64) (partition uint16, back uint32, data []byte, reason string) {
	if len(b) < frameHeaderSize {
		return 0, 0, nil, fmt.Sprintf("incomplete frame header (%d of %d bytes)", len(b), frameHeaderSize)
	}
	// The 16-bit header check is for scans (laterWrite); here the full
	// checksum, which covers it, decides.
	salt := posSalt(logSalt, pos)
	n := binary.LittleEndian.Uint32(b)
	if n > MaxEntryBytes {
		return 0, 0, nil, fmt.Sprintf("frame length %d exceeds the limit of %d", n, MaxEntryBytes)
	}
	if uint64(n) > uint64(len(b)-frameHeaderSize) {
		return 0, 0, nil, fmt.Sprintf("incomplete frame (length %d, only %d bytes left)", n, len(b)-frameHeaderSize)
	}
	crc := crc32.Update(salt, castagnoli, b[:12])
	crc = crc32.Update(crc, castagnoli, b[frameHeaderSize:frameHeaderSize+int(n)])
	if crc != binary.LittleEndian.Uint32(b[12:]) {
		return 0, 0, nil, "checksum mismatch"
	}
	return binary.LittleEndian.Uint16(b[8:]), binary.LittleEndian.Uint32(b[4:]), b[frameHeaderSize : frameHeaderSize+int(n)], ""
}

func encodeSegmentHeader(base, logID uint64, counts []uint64) []byte {
	h := make([]byte, segmentHeaderSize(len(counts)))
	copy(h, segmentMagic)
	binary.LittleEndian.PutUint32(h[8:], segmentVersion)
	binary.LittleEndian.PutUint64(h[12:], base)
	binary.LittleEndian.PutUint32(h[20:], uint32(len(counts)))
	binary.LittleEndian.PutUint64(h[24:], logID)
	for i, c := range counts {
		binary.LittleEndian.PutUint64(h[countsOffset+8*i:], c)
	}
	n := len(h) - 4
	binary.LittleEndian.PutUint32(h[n:], crc32.Checksum(h[:n], castagnoli))
	return h
}

// readSegmentHeader reads and validates the header of the segment at path
// whose name says it starts at base, returning its log id and
// per-partition counts.
func readSegmentHeader(f vfs.File, path string, base uint64, fileSize int64) (uint64, []uint64, error) {
	var fixed [24]byte
	if fileSize < int64(len(fixed)) {
		return 0, nil, &CorruptionError{File: path, Offset: 0, Reason: fmt.Sprintf("file of %d bytes is shorter than a segment header", fileSize)}
	}
	if _, err := f.ReadAt(fixed[:], 0); err != nil {
		return 0, nil, fmt.Errorf("wal: read %s: %w", path, err)
	}
	if string(fixed[:8]) != segmentMagic {
		return 0, nil, &CorruptionError{File: path, Offset: 0, Reason: "bad segment magic (not a Surge WAL segment)"}
	}
	if v := binary.LittleEndian.Uint32(fixed[8:]); v != segmentVersion {
		if v < segmentVersion {
			return 0, nil, fmt.Errorf("%w: segment %s is in log format version %d, written by an earlier Surge; this build reads only version %d. "+
				"Keep that data directory for the release that wrote it and start this build with a new --data-dir",
				ErrUnsupportedVersion, path, v, segmentVersion)
		}
		return 0, nil, fmt.Errorf("%w: segment %s has format version %d, this build reads only version %d (written by a newer Surge: run that release)",
			ErrUnsupportedVersion, path, v, segmentVersion)
	}
	parts := binary.LittleEndian.Uint32(fixed[20:])
	if parts == 0 || parts > MaxPartitions {
		return 0, nil, &CorruptionError{File: path, Offset: 0, Reason: fmt.Sprintf("segment header names %d partitions (valid: 1 to %d)", parts, MaxPartitions)}
	}
	size := segmentHeaderSize(int(parts))
	if fileSize < size {
		return 0, nil, &CorruptionError{File: path, Offset: 0, Reason: fmt.Sprintf("file of %d bytes is shorter than its %d-byte segment header", fileSize, size)}
	}
	h := make([]byte, size)
	if _, err := f.ReadAt(h, 0); err != nil {
		return 0, nil, fmt.Errorf("wal: read %s: %w", path, err)
	}
	if binary.LittleEndian.Uint32(h[size-4:]) != crc32.Checksum(h[:size-4], castagnoli) {
		return 0, nil, &CorruptionError{File: path, Offset: 0, Reason: "segment header checksum mismatch"}
	}
	if b := binary.LittleEndian.Uint64(h[12:]); b != base {
		return 0, nil, &CorruptionError{File: path, Offset: 0, Reason: fmt.Sprintf("segment header says base position %d but the file name says %d", b, base)}
	}
	counts := make([]uint64, parts)
	for i := range counts {
		counts[i] = binary.LittleEndian.Uint64(h[countsOffset+8*i:])
	}
	return binary.LittleEndian.Uint64(h[24:]), counts, nil
}

// createSegment makes a new segment durably: header written to a temporary
// file, synced, renamed into place, directory synced. A crash therefore
// leaves either no segment or one with a complete header, never a torn one.
func createSegment(fsys vfs.FS, dir string, base, logID uint64, counts []uint64, sync bool) (vfs.File, string, error) {
	path := filepath.Join(dir, segmentName(base))
	tmp := path + tmpExt
	f, err := fsys.Create(tmp)
	if err != nil {
		return nil, "", err
	}
	fail := func(err error) (vfs.File, string, error) {
		f.Close()
		fsys.Remove(tmp)
		return nil, "", err
	}
	if _, err := f.WriteAt(encodeSegmentHeader(base, logID, counts), 0); err != nil {
		return fail(err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			return fail(err)
		}
	}
	if err := fsys.Rename(tmp, path); err != nil {
		return fail(err)
	}
	// A handle keeps the name it was opened with, and the errors of every
	// later write and fsync through it would name the .tmp file, which no
	// longer exists. Reopen it under the segment's own name.
	if err := f.Close(); err != nil {
		return nil, "", err
	}
	f, err = fsys.OpenWrite(path)
	if err != nil {
		return nil, "", err
	}
	if sync {
		if err := fsys.SyncDir(dir); err != nil {
			f.Close()
			return nil, "", err
		}
	}
	return f, path, nil
}

// listSegments returns the segments in dir by base position and removes
// temporary files left by a crash while a segment was being created or
// repaired.
func listSegments(fsys vfs.FS, dir string) ([]segment, error) {
	names, err := fsys.List(dir)
	if err != nil {
		return nil, fmt.Errorf("wal: %w", err)
	}
	var segs []segment
	for _, name := range names {
		if s, ok := strings.CutSuffix(name, tmpExt); ok {
			if _, ok := parseSegmentName(s); ok {
				fsys.Remove(filepath.Join(dir, name))
			}
			continue
		}
		if base, ok := parseSegmentName(name); ok {
			segs = append(segs, segment{base: base, path: filepath.Join(dir, name)})
		}
	}
	slices.SortFunc(segs, func(a, b segment) int {
		switch {
		case a.base < b.base:
			return -1
		case a.base > b.base:
			return 1
		}
		return 0
	})
	return segs, nil
}

// recover validates all segments, repairs a torn tail of the last one, and
// opens the active segment for writing.
func (l *Log) recover() error {
	dir := l.opts.Dir
	segs, err := listSegments(l.fs, dir)
	if err != nil {
		return err
	}
	if len(segs) == 0 {
		if l.opts.Partitions <= 0 {
			return ErrPartitionsUnknown
		}
		if l.opts.Partitions > MaxPartitions {
			return fmt.Errorf("wal: %d partitions is more than the limit of %d", l.opts.Partitions, MaxPartitions)
		}
		counts := make([]uint64, l.opts.Partitions)
		l.setLogID(newLogID())
		f, path, err := createSegment(l.fs, dir, 0, l.logID, counts, !l.opts.NoSync)
		if err != nil {
			return fmt.Errorf("wal: create first segment: %w", err)
		}
		l.f, l.hdrSize, l.counts = f, segmentHeaderSize(len(counts)), slices.Clone(counts)
		l.aheadEnd = l.hdrSize
		l.segs = []segment{{base: 0, path: path, counts: counts}}
		return nil
	}
	fr := newFrameReader(1 << 20)
	var expect uint64
	var counts []uint64
	for i := range segs {
		s := &segs[i]
		last := i == len(segs)-1
		if i > 0 && s.base != expect {
			return &CorruptionError{File: s.path, Offset: 0, Reason: fmt.Sprintf(
				"segment starts at position %d but the previous segment ends at %d (a segment is missing or was truncated)", s.base, expect)}
		}
		size, err := l.scanSegment(fr, s, last, counts)
		if err != nil {
			return err
		}
		if i == 0 {
			n := len(s.counts)
			if l.opts.Partitions > 0 && l.opts.Partitions != n {
				return fmt.Errorf("%w: the log in %s was written with %d partitions, not %d; keys would move to other partitions. Start with --partitions %d (or 0)",
					ErrPartitionMismatch, dir, n, l.opts.Partitions, n)
			}
		}
		counts = fr.counts
		expect = s.base + uint64(size)
	}
	lastSeg := segs[len(segs)-1]
	f, err := l.fs.OpenWrite(lastSeg.path)
	if err != nil {
		return fmt.Errorf("wal: %w", err)
	}
	l.f = f
	l.hdrSize = segmentHeaderSize(len(counts))
	l.activeSize = int64(expect - lastSeg.base)
	l.counts = slices.Clone(counts)
	l.segs = segs
	l.end.Store(expect)
	l.sealed = fr.sealed
	return nil
}

// scanSegment validates one segment, fills s.counts from its header, and
// returns its record bytes; fr.counts holds the per-partition counts at its
// end. prev are the counts at the end of the previous segment (nil for the
// first), which the header must repeat. It sets l.aheadEnd to the file
// offset up to which the segment's blocks are written (what counts is the
// last segment's).
func (l *Log) scanSegment(fr *frameReader, s *segment, last bool, prev []uint64) (int64, error) {
	f, err := l.fs.Open(s.path)
	if err != nil {
		return 0, fmt.Errorf("wal: %w", err)
	}
	defer f.Close()
	fileSize, err := f.Size()
	if err != nil {
		return 0, fmt.Errorf("wal: %w", err)
	}
	if last && headerNeverWritten(f, fileSize) {
		if repaired, err := l.repairHeader(fr, s, prev, fileSize); repaired || err != nil {
			l.aheadEnd = segmentHeaderSize(len(s.counts))
			return 0, err
		}
	}
	counts, err := l.checkHeader(f, s, prev, fileSize)
	if err != nil {
		return 0, err
	}
	s.counts = counts
	hdr := segmentHeaderSize(len(counts))
	fr.reset(f, l.salt, hdr, hdr, fileSize, s.base, slices.Clone(counts))
	return l.scanFrames(fr, f, s, last, hdr, fileSize)
}

// repairHeader rewrites the header of a last segment whose header was
// never written, when the counts it must hold are known (prev, or zeros
// for a new log's first segment); it reports whether it did.
// createSegment never leaves such a file behind, but a file system that
// lost the header of a brand-new, still empty last segment is harmless to
// repair: it held no records.
func (l *Log) repairHeader(fr *frameReader, s *segment, prev []uint64, fileSize int64) (bool, error) {
	counts := prev
	if counts == nil && s.base == 0 && l.opts.Partitions > 0 {
		counts = make([]uint64, l.opts.Partitions)
	}
	if counts == nil {
		return false, nil
	}
	if prev == nil {
		l.setLogID(newLogID())
	}
	nf, _, err := createSegment(l.fs, l.opts.Dir, s.base, l.logID, counts, !l.opts.NoSync)
	if err != nil {
		return false, fmt.Errorf("wal: repair the header of %s: %w", s.path, err)
	}
	nf.Close()
	s.counts = slices.Clone(counts)
	fr.counts, fr.sealed = slices.Clone(counts), true
	l.recovery = Recovery{File: s.path, TruncatedBytes: fileSize}
	return true, nil
}

// checkHeader reads s's header and checks that it continues the segments
// before it (prev: the counts at their end, nil for the first): the same
// log id, and the counts they end with.
func (l *Log) checkHeader(f vfs.File, s *segment, prev []uint64, fileSize int64) ([]uint64, error) {
	id, counts, err := readSegmentHeader(f, s.path, s.base, fileSize)
	if err != nil {
		return nil, err
	}
	if prev == nil {
		l.setLogID(id)
	} else if id != l.logID {
		return nil, &CorruptionError{File: s.path, Offset: 24, Reason: "the segment belongs to another log (its log id differs from the segments before it)"}
	}
	if prev != nil && !slices.Equal(prev, counts) {
		return nil, &CorruptionError{File: s.path, Offset: countsOffset, Reason: "the per-partition record counts in the segment header disagree with the records of the segments before it"}
	}
	return counts, nil
}

// scanFrames reads s's frames to its end and returns its record bytes. A
// torn frame is corruption anywhere but at the tail of the last segment,
// and there too if a later group commit's frame follows it (that one was
// acknowledged); otherwise the tail is cut off. A tail of zeros the writer
// wrote ahead (see aheadStep) is accepted where it provably holds no
// records: see zeroTail.
func (l *Log) scanFrames(fr *frameReader, f vfs.File, s *segment, last bool, hdr, fileSize int64) (int64, error) {
	for {
		_, _, _, err := fr.next()
		if err == nil {
			continue
		}
		if err == io.EOF {
			l.aheadEnd = fileSize
			return fileSize - hdr, nil
		}
		var fe *frameError
		if !errors.As(err, &fe) {
			return 0, fmt.Errorf("wal: read %s: %w", s.path, err)
		}
		zero, err := zeroTail(f, fe.offset, fileSize)
		if err != nil {
			return 0, fmt.Errorf("wal: read %s: %w", s.path, err)
		}
		if !last {
			// Every write in a segment that is not the last was fsynced
			// before the next segment was created, so nothing in it is
			// torn: only the zeros written ahead may follow its frames.
			// Where its frames end is then proven by the next segment's
			// base, which recover checks against the size returned here
			// (any difference is corruption), so zeros cannot hide lost
			// records.
			if !zero {
				return 0, &CorruptionError{File: s.path, Offset: fe.offset, Reason: fe.reason}
			}
			return fe.offset - hdr, nil
		}
		badPos := s.base + uint64(fe.offset-hdr)
		proof, err := laterWrite(f, l.salt, fe.offset, fileSize, s.base, badPos)
		if err != nil {
			return 0, fmt.Errorf("wal: read %s: %w", s.path, err)
		}
		if proof >= 0 {
			return 0, &CorruptionError{File: s.path, Offset: fe.offset, Reason: fmt.Sprintf(
				"%s; the record at offset %d belongs to a later group commit, so this one had been made durable and acknowledged", fe.reason, proof)}
		}
		// The decision above is the same whatever the tail holds; an
		// all-zero one is only where the writer continues without a copy
		// of the segment or a report: zeros are what it writes ahead.
		if zero {
			l.aheadEnd = fileSize
			return fe.offset - hdr, nil
		}
		if err := l.cutTail(s.path, f, fe.offset); err != nil {
			return 0, err
		}
		l.aheadEnd = fe.offset
		// The frames kept before the tear are not proven durable by a
		// later write yet; the next write or seal proves them.
		fr.sealed = false
		l.recovery = Recovery{File: s.path, TruncatedBytes: fileSize - fe.offset}
		return fe.offset - hdr, nil
	}
}

// zeroTail reports whether the bytes of f from off to size are all zeros
// and no more than maxZeroTail: zeros the writer wrote ahead of the log's
// end, or pages of a torn write that never reached the disk (which hold
// nothing either way). A longer run of zeros is more than the writer
// leaves, so it is handled as before (cut and reported, or corruption).
func zeroTail(f vfs.File, off, size int64) (bool, error) {
	if size-off > maxZeroTail {
		return false, nil
	}
	buf := make([]byte, size-off)
	if _, err := f.ReadAt(buf, off); err != nil && err != io.EOF {
		return false, err
	}
	for _, c := range buf {
		if c != 0 {
			return false, nil
		}
	}
	return true, nil
}

// newLogID draws a log's random id.
func newLogID() uint64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return binary.LittleEndian.Uint64(b[:])
}

func (l *Log) setLogID(id uint64) { l.logID, l.salt = id, logSalt(id) }

// headerNeverWritten reports a file shorter than a segment header's fixed
// part, or all zeros.
func headerNeverWritten(f vfs.File, size int64) bool {
	if size < 24 {
		return true
	}
	buf := make([]byte, 64<<10)
	for off := int64(0); off < size; {
		n, err := f.ReadAt(buf[:min(int64(len(buf)), size-off)], off)
		for _, c := range buf[:n] {
			if c != 0 {
				return false
			}
		}
		if err != nil && err != io.EOF {
			return false
		}
		off += int64(n)
		if n == 0 {
			return false
		}
	}
	return true
}

// laterWrite looks after the bad frame at file offset bad (log position
// badPos) for a valid frame of a group commit that began after badPos, and
// returns its file offset, or -1. Such a frame proves the write holding
// badPos was fsynced before it: the damage is to acknowledged data. Without
// one, everything from badPos on belongs to the last write, which was never
// acknowledged: a torn write, whatever pattern of its pages reached the
// disk.
func laterWrite(f vfs.File, salt uint32, bad, fileSize int64, base, badPos uint64) (int64, error) {
	tail := make([]byte, fileSize-bad)
	if _, err := f.ReadAt(tail, bad); err != nil && err != io.EOF {
		return -1, err
	}
	for i := 1; i+frameHeaderSize <= len(tail); i++ {
		pos := badPos + uint64(i)
		b := tail[i:]
		// The cheap header check first; it is salted with the position.
		if binary.LittleEndian.Uint16(b[10:]) != headerCheck(posSalt(salt, pos), b) {
			continue
		}
		_, back, _, reason := frameAt(b, salt, pos)
		if reason != "" || uint64(back) > pos-base {
			continue
		}
		if pos-uint64(back) > badPos {
			return bad + int64(i), nil
		}
	}
	return -1, nil
}

// cutTail removes everything from off on in the segment at path. It copies
// the good prefix to a temporary file and renames it over the segment, so
// a crash during the repair leaves the original to be repaired again.
func (l *Log) cutTail(path string, f vfs.File, off int64) error {
	keep := make([]byte, off)
	if _, err := f.ReadAt(keep, 0); err != nil && err != io.EOF {
		return fmt.Errorf("wal: repair %s: %w", path, err)
	}
	tmp := path + tmpExt
	nf, err := l.fs.Create(tmp)
	if err != nil {
		return fmt.Errorf("wal: repair %s: %w", path, err)
	}
	_, err = nf.WriteAt(keep, 0)
	if err == nil && !l.opts.NoSync {
		err = nf.Sync()
	}
	if cerr := nf.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = l.fs.Rename(tmp, path)
	}
	if err == nil && !l.opts.NoSync {
		err = l.fs.SyncDir(l.opts.Dir)
	}
	if err != nil {
		l.fs.Remove(tmp)
		return fmt.Errorf("wal: cut the torn tail of %s: %w", path, err)
	}
	return nil
}

// frameError is a frame that does not decode; offset is its file offset.
type frameError struct {
	offset int64
	reason string
}

func (e *frameError) Error() string { return fmt.Sprintf("offset %d: %s", e.offset, e.reason) }

// frameReader decodes the frames of one segment from big reads into one
// reused buffer and hands out data slices that point into it, so reading
// costs no allocation or copy per record. It counts the records of each
// partition as it goes.
type frameReader struct {
	r      io.ReaderAt
	buf    []byte
	lo, hi int   // buffered, unconsumed bytes are buf[lo:hi]
	off    int64 // file offset of buf[lo]
	rdOff  int64 // file offset of the next read
	limit  int64 // file offset where the segment's records end
	base   uint64
	hdr    int64
	salt   uint32
	counts []uint64
	// sealed: the last frame read was a seal, or none was read.
	sealed bool
}

func newFrameReader(size int) *frameReader { return &frameReader{buf: make([]byte, size)} }

// reset starts reading the frames of a segment (header size hdr, base
// position base) at file offset off, up to file offset limit; counts (may
// be nil) is advanced per record.
func (fr *frameReader) reset(r io.ReaderAt, salt uint32, hdr, off, limit int64, base uint64, counts []uint64) {
	fr.r, fr.lo, fr.hi, fr.off, fr.rdOff, fr.limit = r, 0, 0, off, off, limit
	fr.base, fr.hdr, fr.salt, fr.counts = base, hdr, salt, counts
	fr.sealed = true
}

// fill tries to buffer at least n bytes; false means the segment ended.
func (fr *frameReader) fill(n int) (bool, error) {
	for fr.hi-fr.lo < n {
		if fr.rdOff >= fr.limit {
			return false, nil
		}
		if len(fr.buf)-fr.lo < n {
			if n > len(fr.buf) {
				nb := make([]byte, max(n, 2*len(fr.buf)))
				fr.hi = copy(nb, fr.buf[fr.lo:fr.hi])
				fr.buf = nb
			} else {
				fr.hi = copy(fr.buf, fr.buf[fr.lo:fr.hi])
			}
			fr.lo = 0
		}
		want := min(int64(len(fr.buf)-fr.hi), fr.limit-fr.rdOff)
		m, err := fr.r.ReadAt(fr.buf[fr.hi:fr.hi+int(want)], fr.rdOff)
		fr.hi += m
		fr.rdOff += int64(m)
		if err != nil && !(err == io.EOF && int64(m) == want) {
			if err == io.EOF {
				return false, io.ErrUnexpectedEOF
			}
			return false, err
		}
	}
	return true, nil
}

// next returns the next frame that is not a seal, with its log position.
// Errors: io.EOF at a clean end, *frameError for a frame that does not
// decode, anything else for a failed read.
func (fr *frameReader) next() (uint64, uint16, []byte, error) {
	for {
		ok, err := fr.fill(frameHeaderSize)
		if err != nil {
			return 0, 0, nil, err
		}
		if !ok {
			if fr.hi == fr.lo {
				return 0, 0, nil, io.EOF
			}
			return 0, 0, nil, &frameError{fr.off, fmt.Sprintf("incomplete frame header (%d of %d bytes)", fr.hi-fr.lo, frameHeaderSize)}
		}
		n := binary.LittleEndian.Uint32(fr.buf[fr.lo:])
		total := frameHeaderSize + int(min(n, MaxEntryBytes+1))
		if n <= MaxEntryBytes {
			if _, err := fr.fill(total); err != nil {
				return 0, 0, nil, err
			}
		}
		pos := fr.pos()
		part, back, data, reason := frameAt(fr.buf[fr.lo:fr.hi], fr.salt, pos)
		if reason != "" {
			return 0, 0, nil, &frameError{fr.off, reason}
		}
		if uint64(back) > pos-fr.base {
			return 0, 0, nil, &frameError{fr.off, fmt.Sprintf("frame says its write began %d bytes earlier, before the segment", back)}
		}
		if part != sealPartition && fr.counts != nil && int(part) >= len(fr.counts) {
			return 0, 0, nil, &frameError{fr.off, fmt.Sprintf("frame of partition %d in a log of %d partitions", part, len(fr.counts))}
		}
		fr.lo += frameHeaderSize + len(data)
		fr.off += int64(frameHeaderSize + len(data))
		fr.sealed = part == sealPartition
		if part == sealPartition {
			if len(data) != 0 {
				return 0, 0, nil, &frameError{fr.off - int64(frameHeaderSize+len(data)), "seal frame with data"}
			}
			continue
		}
		if fr.counts != nil {
			fr.counts[part]++
		}
		return pos, part, data, nil
	}
}

// pos is the log position of the frame at fr.off.
func (fr *frameReader) pos() uint64 { return fr.base + uint64(fr.off-fr.hdr) }
