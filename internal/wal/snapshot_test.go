package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/surge-run/surge/internal/cmdlog"
)

func snapNames(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "snap-*.snap"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range m {
		m[i] = filepath.Base(m[i])
	}
	slices.Sort(m)
	return m
}

func TestSnapshotRoundTrip(t *testing.T) {
	dir := t.TempDir()
	if _, _, ok, err := (SnapshotDir{Dir: dir}).Latest(1); ok || err != nil {
		t.Fatalf("empty dir: ok=%v err=%v", ok, err)
	}
	if _, _, ok, err := (SnapshotDir{Dir: filepath.Join(dir, "missing")}).Latest(1); ok || err != nil {
		t.Fatalf("missing dir: ok=%v err=%v", ok, err)
	}
	data := bytes.Repeat([]byte("state"), 1000)
	if err := (SnapshotDir{Dir: dir}).Write(1, 12345, data); err != nil {
		t.Fatal(err)
	}
	pos, got, ok, err := (SnapshotDir{Dir: dir}).Latest(1)
	if err != nil || !ok || pos != 12345 || !bytes.Equal(got, data) {
		t.Fatalf("LatestSnapshot = %d, %d bytes, %v, %v", pos, len(got), ok, err)
	}
	if _, _, ok, err := (SnapshotDir{Dir: dir}).Latest(2); ok || err != nil {
		t.Fatalf("other partition: ok=%v err=%v", ok, err)
	}
	if err := (SnapshotDir{Dir: dir}).Write(2, 7, nil); err != nil {
		t.Fatal(err)
	}
	pos, got, ok, err = (SnapshotDir{Dir: dir}).Latest(2)
	if err != nil || !ok || pos != 7 || len(got) != 0 {
		t.Fatalf("empty snapshot: %d, %d bytes, %v, %v", pos, len(got), ok, err)
	}
	if names := snapNames(t, dir); !slices.Equal(names, []string{
		"snap-00001-00000000000000012345.snap",
		"snap-00002-00000000000000000007.snap",
	}) {
		t.Fatalf("files = %v", names)
	}
	if tmps, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(tmps) != 0 {
		t.Fatalf("temporary files left: %v", tmps)
	}
}

func TestSnapshotPrune(t *testing.T) {
	dir := t.TempDir()
	// Positions out of order on purpose: "newest" means highest position.
	for _, pos := range []cmdlog.Position{100, 300, 200, 1_000_000_000_000} {
		if err := (SnapshotDir{Dir: dir}).Write(5, pos, []byte{byte(pos)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := (SnapshotDir{Dir: dir}).Write(123456, 1, []byte("big partition number")); err != nil {
		t.Fatal(err)
	}
	if err := (SnapshotDir{Dir: dir}).Write(6, 50, []byte("other")); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"snap-00005-00000000000000000300.snap",
		"snap-00005-00000001000000000000.snap",
		"snap-00006-00000000000000000050.snap",
		"snap-123456-00000000000000000001.snap",
	}
	if names := snapNames(t, dir); !slices.Equal(names, want) {
		t.Fatalf("files = %v, want %v", names, want)
	}
	pos, data, ok, err := (SnapshotDir{Dir: dir}).Latest(5)
	if err != nil || !ok || pos != 1_000_000_000_000 || !bytes.Equal(data, []byte{byte(pos)}) {
		t.Fatalf("LatestSnapshot = %d, %v, %v, %v", pos, data, ok, err)
	}
	pos, data, ok, err = (SnapshotDir{Dir: dir}).Latest(123456)
	if err != nil || !ok || pos != 1 || string(data) != "big partition number" {
		t.Fatalf("Latest(123456) = %d, %q, %v, %v", pos, data, ok, err)
	}
}

func TestSnapshotCorrupt(t *testing.T) {
	setup := func(t *testing.T) (dir, newest string) {
		dir = t.TempDir()
		if err := (SnapshotDir{Dir: dir}).Write(3, 10, []byte("old state")); err != nil {
			t.Fatal(err)
		}
		if err := (SnapshotDir{Dir: dir}).Write(3, 20, []byte("new state")); err != nil {
			t.Fatal(err)
		}
		return dir, filepath.Join(dir, snapshotName(3, 20))
	}
	damage := map[string]func(t *testing.T, path string){
		"data byte flipped": func(t *testing.T, path string) {
			b, _ := os.ReadFile(path)
			b[len(b)-1] ^= 1
			os.WriteFile(path, b, 0o644)
		},
		"truncated": func(t *testing.T, path string) {
			os.Truncate(path, snapshotHeaderSize+2)
		},
		"truncated header": func(t *testing.T, path string) {
			os.Truncate(path, 20)
		},
		"wrong position in header": func(t *testing.T, path string) {
			b, _ := os.ReadFile(path)
			binary.LittleEndian.PutUint64(b[16:], 99)
			os.WriteFile(path, b, 0o644)
		},
		"not a snapshot": func(t *testing.T, path string) {
			os.WriteFile(path, []byte("hello"), 0o644)
		},
	}
	for name, dmg := range damage {
		t.Run(name, func(t *testing.T) {
			dir, newest := setup(t)
			dmg(t, newest)
			_, _, ok, err := (SnapshotDir{Dir: dir}).Latest(3)
			if err == nil || ok || !strings.Contains(err.Error(), newest) {
				t.Fatalf("LatestSnapshot = ok=%v err=%v, want error naming %s", ok, err, newest)
			}
		})
	}
	t.Run("unknown version", func(t *testing.T) {
		dir, newest := setup(t)
		b, _ := os.ReadFile(newest)
		binary.LittleEndian.PutUint32(b[8:], 9)
		os.WriteFile(newest, b, 0o644)
		_, _, _, err := (SnapshotDir{Dir: dir}).Latest(3)
		if !errors.Is(err, ErrUnsupportedVersion) || !strings.Contains(err.Error(), "version 9") || !strings.Contains(err.Error(), newest) {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestSnapshotIgnoresTempFiles(t *testing.T) {
	dir := t.TempDir()
	if err := (SnapshotDir{Dir: dir}).Write(1, 10, []byte("a")); err != nil {
		t.Fatal(err)
	}
	// A write interrupted before its rename leaves only a temporary file.
	if err := os.WriteFile(filepath.Join(dir, ".snap-00001-123.tmp"), []byte("partial"), 0o644); err != nil {
		t.Fatal(err)
	}
	pos, data, ok, err := (SnapshotDir{Dir: dir}).Latest(1)
	if err != nil || !ok || pos != 10 || string(data) != "a" {
		t.Fatalf("LatestSnapshot = %d, %q, %v, %v", pos, data, ok, err)
	}
}

// Snapshots may share the log's directory without confusing it.
func TestSnapshotsBesideSegments(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, Options{Partitions: 8, SealDelay: -1, Dir: dir, NoSync: true})
	recs := appendWait(t, l, []cmdlog.Entry{{Partition: 1, Data: []byte("cmd")}})
	snapAt := l.End()
	if err := (SnapshotDir{Dir: dir}).Write(1, snapAt, []byte("snap")); err != nil {
		t.Fatal(err)
	}
	closeLog(t, l)
	l = openLog(t, Options{Partitions: 8, SealDelay: -1, Dir: dir, NoSync: true})
	defer closeLog(t, l)
	checkRecs(t, replayAll(t, l, 0), recs)
	pos, _, ok, err := (SnapshotDir{Dir: dir}).Latest(1)
	if err != nil || !ok || pos != snapAt {
		t.Fatalf("LatestSnapshot = %d, %v, %v", pos, ok, err)
	}
}
