package enginetest

import (
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/vfs"
	"github.com/surge-run/surge/internal/wal"
)

// OpenEngine opens an embedded engine on the real write-ahead log in
// dir/wal, with snapshots in dir/snap, as `surge serve` does: opts says
// the rest (Partitions must be set; a nil Logger discards). Opening the
// same dir again after Close is a restart: the engine recovers from the
// snapshots and the log. A test that watches what is logged sets
// opts.Log to its wrapper of OpenWAL's log. The engine is closed when the
// test ends, if the test has not closed it (a test that cares about
// Close's error closes it itself).
func OpenEngine(t testing.TB, dir string, opts engine.Options, workloads ...engine.Workload) *engine.Engine {
	t.Helper()
	if opts.Log == nil {
		opts.Log = OpenWAL(t, dir, opts.Partitions)
	}
	lg := opts.Log
	snaps, err := wal.OpenSnapshotDir(vfs.OS, filepath.Join(dir, "snap"))
	if err != nil {
		lg.Close()
		t.Fatal(err)
	}
	opts.Snapshots = snaps
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	eng, err := engine.Open(opts, workloads...)
	if err != nil {
		lg.Close() // the engine owns the log only once it is open
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	return eng
}

// OpenWAL opens the write-ahead log of partitions partitions in dir/wal,
// where OpenEngine keeps it.
func OpenWAL(t testing.TB, dir string, partitions int) *wal.Log {
	t.Helper()
	lg, err := wal.Open(wal.Options{Dir: filepath.Join(dir, "wal"), Partitions: partitions})
	if err != nil {
		t.Fatal(err)
	}
	return lg
}

// APIEngine is the engine of a workload's API tests: embedded, on the
// write-ahead log in a fresh directory, or, with ForwardEnv set, the node
// of Forwarding that serves no partition, so that every request, reply
// and note crosses the wire. It is closed when the test ends.
func APIEngine(t testing.TB, opts engine.Options, workloads ...engine.Workload) *engine.Engine {
	t.Helper()
	if Forward() {
		return Forwarding(t, opts, workloads...)
	}
	return OpenEngine(t, t.TempDir(), opts, workloads...)
}
