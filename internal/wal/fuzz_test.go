package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"

	"github.com/surge-run/surge/internal/cmdlog"
	"github.com/surge-run/surge/internal/vfs/strictfs"
)

// fuzzLogBytes builds a small real log on fs and returns the bytes of its
// one segment, as a seed for the fuzzers.
func fuzzLogBytes(f *testing.F) []byte {
	fs := strictfs.New()
	l, err := Open(Options{Dir: "wal", FS: fs, Partitions: 3, SealDelay: -1})
	if err != nil {
		f.Fatal(err)
	}
	for i := range 5 {
		done := make(chan error, 1)
		l.Append([]cmdlog.Entry{{Partition: uint32(i % 3), Data: bytes.Repeat([]byte{byte(i)}, 10*i)}}, func(_, _ cmdlog.Position, err error) { done <- err })
		if err := <-done; err != nil {
			f.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		f.Fatal(err)
	}
	b, err := fs.ReadFile("wal/" + segmentName(0))
	if err != nil {
		f.Fatal(err)
	}
	return b
}

// FuzzOpenSegment: whatever bytes a segment holds (last or not), Open
// either opens a log whose records replay, or fails with an error; it never
// panics and never allocates without bound.
func FuzzOpenSegment(f *testing.F) {
	good := fuzzLogBytes(f)
	f.Add(good, false)
	f.Add(good, true)
	f.Add(good[:len(good)-7], false)
	f.Add(append(bytes.Clone(good), make([]byte, 4096)...), false)
	f.Add([]byte("SURGEWAL\x01\x00\x00\x00"), false)
	f.Fuzz(func(t *testing.T, seg []byte, followed bool) {
		fs := strictfs.New()
		if err := fs.MkdirAll("wal"); err != nil {
			t.Fatal(err)
		}
		if err := fs.WriteFile("wal/"+segmentName(0), seg); err != nil {
			t.Fatal(err)
		}
		if followed {
			// The fuzzed segment is not the last one.
			if err := fs.WriteFile("wal/"+segmentName(uint64(max(len(seg)-int(segmentHeaderSize(3)), 0))), good); err != nil {
				t.Fatal(err)
			}
		}
		l, err := Open(Options{Dir: "wal", FS: fs, SealDelay: -1})
		if err != nil {
			return
		}
		start, counts := l.Start()
		if len(counts) != l.Partitions() {
			t.Fatalf("%d counts for %d partitions", len(counts), l.Partitions())
		}
		if err := l.Replay(start, func(cmdlog.Position, cmdlog.Entry) error { return nil }); err != nil {
			var ce *CorruptionError
			if !errors.As(err, &ce) {
				t.Fatalf("replay of an opened log: %v", err)
			}
		}
		l.Close()
	})
}

// FuzzFrameAt: frameAt accepts a frame only if it decodes within the bytes
// given, for any input.
func FuzzFrameAt(f *testing.F) {
	f.Add(appendFrame(nil, logSalt(7), 100, 3, 2, []byte("data")), uint64(100))
	f.Add(make([]byte, 40), uint64(0))
	f.Fuzz(func(t *testing.T, b []byte, pos uint64) {
		_, _, data, reason := frameAt(b, logSalt(7), pos)
		if reason == "" && frameHeaderSize+len(data) > len(b) {
			t.Fatalf("frame of %d data bytes accepted from %d bytes", len(data), len(b))
		}
	})
}

// FuzzSnapshotFile: any snapshot file content is either read back whole
// or refused with an error.
func FuzzSnapshotFile(f *testing.F) {
	fs := strictfs.New()
	d, err := OpenSnapshotDir(fs, "snap")
	if err != nil {
		f.Fatal(err)
	}
	if err := d.Write(1, 42, []byte("state")); err != nil {
		f.Fatal(err)
	}
	good, _ := fs.ReadFile("snap/" + snapshotName(1, 42))
	f.Add(good)
	f.Add(good[:20])
	f.Fuzz(func(t *testing.T, b []byte) {
		fs := strictfs.New()
		d, err := OpenSnapshotDir(fs, "snap")
		if err != nil {
			t.Fatal(err)
		}
		if err := fs.WriteFile("snap/"+snapshotName(1, 42), b); err != nil {
			t.Fatal(err)
		}
		pos, data, ok, err := d.Latest(1)
		if err == nil && ok && (pos != 42 || len(data) != len(b)-snapshotHeaderSize) {
			t.Fatalf("accepted pos %d with %d data bytes from a %d-byte file", pos, len(data), len(b))
		}
	})
}

// FuzzPosSalt: the allocation-free salt equals crc32 over the position's
// little-endian bytes.
func FuzzPosSalt(f *testing.F) {
	f.Add(uint32(0), uint64(0))
	f.Add(uint32(0xdeadbeef), uint64(1<<63+12345))
	f.Fuzz(func(t *testing.T, salt uint32, pos uint64) {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], pos)
		if got, want := posSalt(salt, pos), crc32.Update(salt, castagnoli, b[:]); got != want {
			t.Fatalf("posSalt(%#x, %d) = %#x, want %#x", salt, pos, got, want)
		}
	})
}
