package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/surge-run/surge/internal/cmdlog"
	"github.com/surge-run/surge/internal/vfs"
)

// Snapshot header: magic(8) version(4) partition(4) pos(8) dataLen(8)
// dataCRC(4), then data.
const (
	snapshotMagic      = "SURGESNP"
	snapshotVersion    = 1
	snapshotHeaderSize = 36
	snapshotKeep       = 2
	snapshotTmpPrefix  = ".snap-"
)

func snapshotName(partition uint32, pos cmdlog.Position) string {
	return fmt.Sprintf("snap-%05d-%020d.snap", partition, uint64(pos))
}

func parseSnapshotName(name string) (partition uint32, pos cmdlog.Position, ok bool) {
	s, ok := strings.CutPrefix(name, "snap-")
	if !ok {
		return 0, 0, false
	}
	s, ok = strings.CutSuffix(s, ".snap")
	if !ok {
		return 0, 0, false
	}
	ps, posStr, ok := strings.Cut(s, "-")
	// %05d is a minimum width: partitions above 99999 have more digits.
	if !ok || len(ps) < 5 || len(posStr) != 20 {
		return 0, 0, false
	}
	p, err := strconv.ParseUint(ps, 10, 32)
	if err != nil || fmt.Sprintf("%05d", p) != ps {
		return 0, 0, false
	}
	v, err := strconv.ParseUint(posStr, 10, 64)
	if err != nil {
		return 0, 0, false
	}
	return uint32(p), cmdlog.Position(v), true
}

// snapshotChunkBytes bounds how much snapshot data is dirty at a time.
const snapshotChunkBytes = 1 << 20

// SnapshotDir stores per-partition snapshot files in one directory (the
// log's directory works: the names do not clash).
type SnapshotDir struct {
	FS  vfs.FS // nil means the operating system's
	Dir string
	// NoSync skips every fsync. Only for tests that say so.
	NoSync bool
}

// String names the directory, for error messages.
func (d SnapshotDir) String() string { return d.Dir }

func (d SnapshotDir) fs() vfs.FS {
	if d.FS == nil {
		return vfs.OS
	}
	return d.FS
}

// OpenSnapshotDir creates dir if needed and removes the temporary files a
// crash left behind while a snapshot was being written.
func OpenSnapshotDir(fsys vfs.FS, dir string) (SnapshotDir, error) {
	d := SnapshotDir{FS: fsys, Dir: dir}
	if err := d.fs().MkdirAll(dir); err != nil {
		return d, fmt.Errorf("wal: snapshot dir: %w", err)
	}
	names, err := d.fs().List(dir)
	if err != nil {
		return d, fmt.Errorf("wal: snapshot dir: %w", err)
	}
	for _, name := range names {
		if strings.HasPrefix(name, snapshotTmpPrefix) && strings.HasSuffix(name, tmpExt) {
			if err := d.fs().Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return d, fmt.Errorf("wal: removing a leftover snapshot temp file: %w", err)
			}
		}
	}
	return d, nil
}

// Write atomically stores data as the snapshot of partition at log
// position pos, then deletes all but the newest two snapshots of that
// partition. The second newest is kept so that a snapshot whose write was
// interrupted at the storage level still leaves an older one to inspect.
func (d SnapshotDir) Write(partition uint32, pos cmdlog.Position, data []byte) error {
	fsys := d.fs()
	h := make([]byte, snapshotHeaderSize)
	copy(h, snapshotMagic)
	binary.LittleEndian.PutUint32(h[8:], snapshotVersion)
	binary.LittleEndian.PutUint32(h[12:], partition)
	binary.LittleEndian.PutUint64(h[16:], uint64(pos))
	binary.LittleEndian.PutUint64(h[24:], uint64(len(data)))
	binary.LittleEndian.PutUint32(h[32:], crc32.Checksum(data, castagnoli))

	final := filepath.Join(d.Dir, snapshotName(partition, pos))
	tmp := filepath.Join(d.Dir, fmt.Sprintf("%s%05d-%020d%s", snapshotTmpPrefix, partition, uint64(pos), tmpExt))
	f, err := fsys.Create(tmp)
	if err != nil {
		return fmt.Errorf("wal: snapshot: %w", err)
	}
	_, err = f.WriteAt(h, 0)
	// Write and sync in chunks: on ext4 (data=ordered) the log's next
	// fsync would otherwise have to flush the whole dirty snapshot with
	// it, stalling every in-flight request behind tens of megabytes.
	off := int64(len(h))
	for rest := data; err == nil && len(rest) > 0; {
		n := min(len(rest), snapshotChunkBytes)
		if _, err = f.WriteAt(rest[:n], off); err == nil && !d.NoSync {
			err = f.Sync()
		}
		rest = rest[n:]
		off += int64(n)
	}
	if err == nil && len(data) == 0 && !d.NoSync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fsys.Rename(tmp, final)
	}
	if err != nil {
		fsys.Remove(tmp)
		return fmt.Errorf("wal: write snapshot %s: %w", final, err)
	}
	if !d.NoSync {
		if err := fsys.SyncDir(d.Dir); err != nil {
			return fmt.Errorf("wal: write snapshot %s: sync dir: %w", final, err)
		}
	}
	return d.prune(partition)
}

func (d SnapshotDir) prune(partition uint32) error {
	snaps, err := d.list(partition)
	if err != nil {
		return err
	}
	if len(snaps) <= snapshotKeep {
		return nil
	}
	var errs []error
	for _, s := range snaps[:len(snaps)-snapshotKeep] {
		if err := d.fs().Remove(s.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("wal: prune snapshots: %w", errors.Join(errs...))
	}
	return nil
}

type snapFile struct {
	pos  cmdlog.Position
	path string
}

// list returns partition's snapshots, oldest first.
func (d SnapshotDir) list(partition uint32) ([]snapFile, error) {
	names, err := d.fs().List(d.Dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("wal: list snapshots: %w", err)
	}
	var out []snapFile
	for _, name := range names { // sorted by name; names sort by position
		p, pos, ok := parseSnapshotName(name)
		if ok && p == partition {
			out = append(out, snapFile{pos: pos, path: filepath.Join(d.Dir, name)})
		}
	}
	return out, nil
}

// Latest returns the newest snapshot of partition. If that file is damaged
// it returns an error naming it rather than falling back to an older
// snapshot: log segments needed to replay from the older one may already
// have been released. ok is false when there is no snapshot.
func (d SnapshotDir) Latest(partition uint32) (pos cmdlog.Position, data []byte, ok bool, err error) {
	snaps, err := d.list(partition)
	if err != nil || len(snaps) == 0 {
		return 0, nil, false, err
	}
	s := snaps[len(snaps)-1]
	b, err := vfs.ReadFile(d.fs(), s.path)
	if err != nil {
		return 0, nil, false, fmt.Errorf("wal: read snapshot: %w", err)
	}
	bad := func(reason string) error {
		return fmt.Errorf("wal: snapshot %s is damaged: %s; not falling back to an older snapshot because the log it needs may have been released. "+
			"Restore this file from a backup; keep the data directory as it is", s.path, reason)
	}
	if len(b) < 12 || string(b[:8]) != snapshotMagic {
		return 0, nil, false, bad("bad magic or truncated header")
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != snapshotVersion {
		return 0, nil, false, fmt.Errorf("%w: snapshot %s has format version %d, this build reads only version %d (written by a newer Surge: run that release)",
			ErrUnsupportedVersion, s.path, v, snapshotVersion)
	}
	if len(b) < snapshotHeaderSize {
		return 0, nil, false, bad("truncated header")
	}
	if p := binary.LittleEndian.Uint32(b[12:]); p != partition {
		return 0, nil, false, bad(fmt.Sprintf("header says partition %d", p))
	}
	if p := cmdlog.Position(binary.LittleEndian.Uint64(b[16:])); p != s.pos {
		return 0, nil, false, bad(fmt.Sprintf("header says position %d", p))
	}
	if n := binary.LittleEndian.Uint64(b[24:]); n != uint64(len(b)-snapshotHeaderSize) {
		return 0, nil, false, bad(fmt.Sprintf("header says %d data bytes, file has %d", n, len(b)-snapshotHeaderSize))
	}
	data = b[snapshotHeaderSize:]
	if crc32.Checksum(data, castagnoli) != binary.LittleEndian.Uint32(b[32:]) {
		return 0, nil, false, bad("checksum mismatch")
	}
	return s.pos, data, true, nil
}
