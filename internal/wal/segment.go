package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Segment header: magic(8) version(4) base(8) headerCRC(4). The version sits
// right after the magic in every format version so that an old build can
// name the version it does not understand.
const (
	segmentMagic      = "SURGEWAL"
	segmentVersion    = 1
	segmentHeaderSize = 24
	segmentExt        = ".wal"
	tmpExt            = ".tmp"
)

// Frame: length(4) crc(4) partition(4) data(length). The CRC covers
// partition and data, which are contiguous, so one checksum call suffices.
const frameHeaderSize = 12

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

func appendFrame(buf []byte, partition uint32, data []byte) []byte {
	off := len(buf)
	buf = slices.Grow(buf, frameHeaderSize+len(data))
	buf = buf[:off+frameHeaderSize]
	binary.LittleEndian.PutUint32(buf[off:], uint32(len(data)))
	binary.LittleEndian.PutUint32(buf[off+8:], partition)
	buf = append(buf, data...)
	binary.LittleEndian.PutUint32(buf[off+4:], crc32.Checksum(buf[off+8:], castagnoli))
	return buf
}

func encodeSegmentHeader(base uint64) []byte {
	h := make([]byte, segmentHeaderSize)
	copy(h, segmentMagic)
	binary.LittleEndian.PutUint32(h[8:], segmentVersion)
	binary.LittleEndian.PutUint64(h[12:], base)
	binary.LittleEndian.PutUint32(h[20:], crc32.Checksum(h[:20], castagnoli))
	return h
}

// checkSegmentHeader validates h (segmentHeaderSize bytes) of the segment at
// path whose name says it starts at base.
func checkSegmentHeader(path string, h []byte, base uint64) error {
	if string(h[:8]) != segmentMagic {
		return &CorruptionError{File: path, Offset: 0, Reason: "bad segment magic (not a Surge WAL segment)"}
	}
	if v := binary.LittleEndian.Uint32(h[8:]); v != segmentVersion {
		return fmt.Errorf("%w: segment %s has format version %d, this build reads only version %d (written by a newer Surge?)",
			ErrUnsupportedVersion, path, v, segmentVersion)
	}
	if binary.LittleEndian.Uint32(h[20:]) != crc32.Checksum(h[:20], castagnoli) {
		return &CorruptionError{File: path, Offset: 0, Reason: "segment header checksum mismatch"}
	}
	if b := binary.LittleEndian.Uint64(h[12:]); b != base {
		return &CorruptionError{File: path, Offset: 0, Reason: fmt.Sprintf("segment header says base position %d but the file name says %d", b, base)}
	}
	return nil
}

// createSegment makes a new segment durably: header written to a temporary
// file, synced, renamed into place, directory synced. A crash therefore
// leaves either no segment or one with a complete header, never a torn one.
// The returned file is open for writing, positioned after the header.
func createSegment(dir string, base uint64, sync bool) (*os.File, string, error) {
	path := filepath.Join(dir, segmentName(base))
	tmp := path + tmpExt
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, "", err
	}
	fail := func(err error) (*os.File, string, error) {
		f.Close()
		os.Remove(tmp)
		return nil, "", err
	}
	if _, err := f.Write(encodeSegmentHeader(base)); err != nil {
		return fail(err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			return fail(err)
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail(err)
	}
	if sync {
		if err := syncDir(dir); err != nil {
			f.Close()
			return nil, "", err
		}
	}
	return f, path, nil
}

// listSegments returns the segments in dir by base position and removes
// temporary files left by a crash during createSegment.
func listSegments(dir string) ([]segment, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("wal: %w", err)
	}
	var segs []segment
	for _, de := range des {
		name := de.Name()
		if s, ok := strings.CutSuffix(name, tmpExt); ok {
			if _, ok := parseSegmentName(s); ok {
				os.Remove(filepath.Join(dir, name))
			}
			continue
		}
		if base, ok := parseSegmentName(name); ok && de.Type().IsRegular() {
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
	segs, err := listSegments(dir)
	if err != nil {
		return err
	}
	if len(segs) == 0 {
		f, path, err := createSegment(dir, 0, !l.opts.NoSync)
		if err != nil {
			return fmt.Errorf("wal: create first segment: %w", err)
		}
		l.f = f
		l.segs = []segment{{base: 0, path: path}}
		return nil
	}
	fr := newFrameReader(1 << 20)
	var expect uint64
	for i, s := range segs {
		last := i == len(segs)-1
		if i > 0 && s.base != expect {
			return &CorruptionError{File: s.path, Offset: 0, Reason: fmt.Sprintf(
				"segment starts at position %d but the previous segment ends at %d (a segment is missing or was truncated)", s.base, expect)}
		}
		size, err := l.scanSegment(fr, s, last)
		if err != nil {
			return err
		}
		expect = s.base + uint64(size)
	}
	lastSeg := segs[len(segs)-1]
	f, err := os.OpenFile(lastSeg.path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("wal: %w", err)
	}
	end, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		f.Close()
		return fmt.Errorf("wal: %w", err)
	}
	l.f = f
	l.activeSize = end - segmentHeaderSize
	l.segs = segs
	l.end.Store(expect)
	return nil
}

// scanSegment validates one segment and returns its record bytes. Only the
// last segment may be repaired: earlier ones were fully synced before the
// next was created, so any damage in them is real corruption.
func (l *Log) scanSegment(fr *frameReader, s segment, last bool) (int64, error) {
	f, err := os.Open(s.path)
	if err != nil {
		return 0, fmt.Errorf("wal: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("wal: %w", err)
	}
	fileSize := st.Size()

	var h [segmentHeaderSize]byte
	n, err := io.ReadFull(f, h[:])
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return 0, fmt.Errorf("wal: %w", err)
	}
	if n < segmentHeaderSize || allZero(h[:]) {
		// createSegment never leaves such a file behind, but a filesystem
		// that lost the header of a brand-new, still empty segment is
		// harmless to repair when it is the last one.
		if last && n < segmentHeaderSize || last && fileAllZero(f, fileSize) {
			if err := l.rewriteHeader(s); err != nil {
				return 0, err
			}
			l.recovery = Recovery{File: s.path, TruncatedBytes: max(fileSize-segmentHeaderSize, 0)}
			return 0, nil
		}
		return 0, &CorruptionError{File: s.path, Offset: 0, Reason: "truncated or zeroed segment header"}
	}
	if err := checkSegmentHeader(s.path, h[:], s.base); err != nil {
		return 0, err
	}

	fr.reset(io.NewSectionReader(f, segmentHeaderSize, fileSize-segmentHeaderSize), segmentHeaderSize)
	for {
		_, _, err := fr.next()
		if err == nil {
			continue
		}
		if err == io.EOF {
			return fileSize - segmentHeaderSize, nil
		}
		var fe *frameError
		if !errors.As(err, &fe) {
			return 0, fmt.Errorf("wal: read %s: %w", s.path, err)
		}
		if !last {
			return 0, &CorruptionError{File: s.path, Offset: fe.offset, Reason: fe.reason}
		}
		valid, err := validFrameAfter(f, fe.offset, fileSize)
		if err != nil {
			return 0, fmt.Errorf("wal: read %s: %w", s.path, err)
		}
		if valid >= 0 {
			return 0, &CorruptionError{File: s.path, Offset: fe.offset, Reason: fmt.Sprintf(
				"%s, and a valid record follows at offset %d, so this is not a torn write", fe.reason, valid)}
		}
		if err := truncateFile(s.path, fe.offset, !l.opts.NoSync); err != nil {
			return 0, err
		}
		l.recovery = Recovery{File: s.path, TruncatedBytes: fileSize - fe.offset}
		return fe.offset - segmentHeaderSize, nil
	}
}

func (l *Log) rewriteHeader(s segment) error {
	f, err := os.OpenFile(s.path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return fmt.Errorf("wal: %w", err)
	}
	_, err = f.Write(encodeSegmentHeader(s.base))
	if err == nil && !l.opts.NoSync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("wal: repair header of %s: %w", s.path, err)
	}
	return nil
}

func truncateFile(path string, size int64, sync bool) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("wal: truncate torn tail: %w", err)
	}
	err = f.Truncate(size)
	if err == nil && sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("wal: truncate torn tail of %s: %w", path, err)
	}
	return nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func fileAllZero(f *os.File, size int64) bool {
	buf := make([]byte, 64<<10)
	for off := int64(0); off < size; {
		n, err := f.ReadAt(buf[:min(int64(len(buf)), size-off)], off)
		if !allZero(buf[:n]) {
			return false
		}
		if err != nil {
			return err == io.EOF && off+int64(n) >= size
		}
		off += int64(n)
	}
	return true
}

// validFrameAfter reports the file offset of the first intact frame that
// starts after bad, or -1. Finding one means the damage at bad is not a torn
// write (which only ever affects the end) but corruption in the middle.
func validFrameAfter(f *os.File, bad, fileSize int64) (int64, error) {
	tail := make([]byte, fileSize-bad)
	if _, err := f.ReadAt(tail, bad); err != nil && err != io.EOF {
		return -1, err
	}
	for i := 1; i+frameHeaderSize <= len(tail); i++ {
		b := tail[i:]
		n := binary.LittleEndian.Uint32(b)
		if n > MaxEntryBytes || uint64(n) > uint64(len(b)-frameHeaderSize) {
			continue
		}
		if crc32.Checksum(b[8:frameHeaderSize+int(n)], castagnoli) == binary.LittleEndian.Uint32(b[4:]) {
			return bad + int64(i), nil
		}
	}
	return -1, nil
}

// frameError is a frame that does not decode; offset is its file offset.
type frameError struct {
	offset int64
	reason string
}

func (e *frameError) Error() string { return fmt.Sprintf("offset %d: %s", e.offset, e.reason) }

// frameReader decodes frames from big reads into one reused buffer and
// hands out data slices that point into it, so that reading costs no
// allocation or copy per record.
type frameReader struct {
	r      io.Reader
	buf    []byte
	lo, hi int   // buffered, unconsumed bytes are buf[lo:hi]
	off    int64 // file offset of buf[lo]
	rerr   error
}

func newFrameReader(size int) *frameReader { return &frameReader{buf: make([]byte, size)} }

func (fr *frameReader) reset(r io.Reader, off int64) {
	fr.r, fr.lo, fr.hi, fr.off, fr.rerr = r, 0, 0, off, nil
}

// fill tries to buffer at least n bytes; false means the input ended (or
// failed, see rerr) first.
func (fr *frameReader) fill(n int) bool {
	for fr.hi-fr.lo < n {
		if fr.rerr != nil {
			return false
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
		m, err := fr.r.Read(fr.buf[fr.hi:])
		fr.hi += m
		if err != nil {
			fr.rerr = err
		}
	}
	return true
}

// next returns the next frame. Errors: io.EOF at a clean end, *frameError
// for a frame that does not decode, anything else for a failed read.
func (fr *frameReader) next() (uint32, []byte, error) {
	if !fr.fill(frameHeaderSize) {
		if fr.rerr != io.EOF {
			return 0, nil, fr.rerr
		}
		if fr.hi == fr.lo {
			return 0, nil, io.EOF
		}
		return 0, nil, &frameError{fr.off, fmt.Sprintf("incomplete frame header (%d of %d bytes)", fr.hi-fr.lo, frameHeaderSize)}
	}
	b := fr.buf[fr.lo:fr.hi]
	n := binary.LittleEndian.Uint32(b)
	if n > MaxEntryBytes {
		return 0, nil, &frameError{fr.off, fmt.Sprintf("frame length %d exceeds the limit of %d", n, MaxEntryBytes)}
	}
	total := frameHeaderSize + int(n)
	if !fr.fill(total) {
		if fr.rerr != io.EOF {
			return 0, nil, fr.rerr
		}
		return 0, nil, &frameError{fr.off, fmt.Sprintf("incomplete frame (length %d, only %d bytes left)", n, fr.hi-fr.lo-frameHeaderSize)}
	}
	b = fr.buf[fr.lo : fr.lo+total]
	if crc32.Checksum(b[8:], castagnoli) != binary.LittleEndian.Uint32(b[4:]) {
		return 0, nil, &frameError{fr.off, "checksum mismatch"}
	}
	fr.lo += total
	fr.off += int64(total)
	return binary.LittleEndian.Uint32(b[8:]), b[frameHeaderSize:], nil
}
