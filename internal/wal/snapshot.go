package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/surge-run/surge/internal/cmdlog"
)

// Snapshot header: magic(8) version(4) partition(4) pos(8) dataLen(8)
// dataCRC(4), then data.
const (
	snapshotMagic      = "SURGESNP"
	snapshotVersion    = 1
	snapshotHeaderSize = 36
	snapshotKeep       = 2
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

// WriteSnapshot atomically stores data as the snapshot of partition at log
// position pos, then deletes all but the newest two snapshots of that
// partition. The second newest is kept so that a snapshot whose write was
// interrupted at the storage level still leaves an older one to inspect.
func WriteSnapshot(dir string, partition uint32, pos cmdlog.Position, data []byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("wal: snapshot: %w", err)
	}
	h := make([]byte, snapshotHeaderSize)
	copy(h, snapshotMagic)
	binary.LittleEndian.PutUint32(h[8:], snapshotVersion)
	binary.LittleEndian.PutUint32(h[12:], partition)
	binary.LittleEndian.PutUint64(h[16:], uint64(pos))
	binary.LittleEndian.PutUint64(h[24:], uint64(len(data)))
	binary.LittleEndian.PutUint32(h[32:], crc32.Checksum(data, castagnoli))

	f, err := os.CreateTemp(dir, fmt.Sprintf(".snap-%05d-*.tmp", partition))
	if err != nil {
		return fmt.Errorf("wal: snapshot: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(h)
	// Write and sync in chunks: on ext4 (data=ordered) the log's next
	// fsync would otherwise have to flush the whole dirty snapshot with
	// it, stalling every in-flight request behind tens of megabytes.
	for rest := data; err == nil && len(rest) > 0; {
		n := min(len(rest), snapshotChunkBytes)
		if _, err = f.Write(rest[:n]); err == nil {
			err = f.Sync()
		}
		rest = rest[n:]
	}
	if err == nil && len(data) == 0 {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	final := filepath.Join(dir, snapshotName(partition, pos))
	if err == nil {
		err = os.Rename(tmp, final)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("wal: write snapshot %s: %w", final, err)
	}
	if err := syncDir(dir); err != nil {
		return err
	}
	return pruneSnapshots(dir, partition)
}

func pruneSnapshots(dir string, partition uint32) error {
	snaps, err := listSnapshots(dir, partition)
	if err != nil {
		return err
	}
	if len(snaps) <= snapshotKeep {
		return nil
	}
	var errs []error
	for _, s := range snaps[:len(snaps)-snapshotKeep] {
		if err := os.Remove(s.path); err != nil && !errors.Is(err, os.ErrNotExist) {
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

// listSnapshots returns partition's snapshots in dir, oldest first.
func listSnapshots(dir string, partition uint32) ([]snapFile, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("wal: list snapshots: %w", err)
	}
	var out []snapFile
	for _, de := range des { // ReadDir sorts by name; names sort by position
		p, pos, ok := parseSnapshotName(de.Name())
		if ok && p == partition && de.Type().IsRegular() {
			out = append(out, snapFile{pos: pos, path: filepath.Join(dir, de.Name())})
		}
	}
	return out, nil
}

// LatestSnapshot returns the newest snapshot of partition. If that file is
// damaged it returns an error naming it rather than falling back to an
// older snapshot: log segments needed to replay from the older one may
// already have been released. ok is false when there is no snapshot.
func LatestSnapshot(dir string, partition uint32) (pos cmdlog.Position, data []byte, ok bool, err error) {
	snaps, err := listSnapshots(dir, partition)
	if err != nil || len(snaps) == 0 {
		return 0, nil, false, err
	}
	s := snaps[len(snaps)-1]
	b, err := os.ReadFile(s.path)
	if err != nil {
		return 0, nil, false, fmt.Errorf("wal: read snapshot: %w", err)
	}
	bad := func(reason string) error {
		return fmt.Errorf("wal: snapshot %s is damaged: %s; refusing to fall back to an older snapshot because the log it needs may be gone (restore from backup)", s.path, reason)
	}
	if len(b) < 12 || string(b[:8]) != snapshotMagic {
		return 0, nil, false, bad("bad magic or truncated header")
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != snapshotVersion {
		return 0, nil, false, fmt.Errorf("%w: snapshot %s has format version %d, this build reads only version %d (written by a newer Surge?)",
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
