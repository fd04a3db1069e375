package wal

import (
	"errors"
	"fmt"
	"io/fs"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/surge-run/surge/internal/cmdlog"
	"github.com/surge-run/surge/internal/vfs"
	"github.com/surge-run/surge/internal/vfs/strictfs"
)

// TestDirectWritesKeepBlocksWrittenAhead: with direct writes, every group
// commit is durable when it returns without an fsync, the zeros written
// ahead with it, and files end on whole blocks.
func TestDirectWritesKeepBlocksWrittenAhead(t *testing.T) { keepsBlocksAhead(t, true) }

// TestTornDirectWriteIsAlwaysRepaired is the torn-write property for
// direct writes: the power fails during the write (each of its pages
// reaching the disk or not) or races it. A direct write also rewrites the
// log's last partial block, whose acknowledged records must survive
// whichever of its pages did.
func TestTornDirectWriteIsAlwaysRepaired(t *testing.T) {
	seeds := uint64(300)
	if testing.Short() {
		seeds = 60
	}
	var st tornStats
	for seed := range seeds {
		tornScenario(t, seed, &st, true)
		if t.Failed() {
			return
		}
	}
	t.Logf("%d seeds: %+v", seeds, st)
	if st.gapAndOldRefused == 0 || st.partial == 0 || st.cut == 0 {
		t.Fatalf("the seeds did not tear a direct write every way (a later page kept and an earlier lost, part replayed, a tail cut): %+v", st)
	}
}

// noDirectFS is a file system that cannot write directly (OpenDirect
// fails), whose direct writes all fail (a disk with larger blocks), or
// whose direct writes after the first fail with EINVAL (a file size
// limit).
type noDirectFS struct {
	*strictfs.FS
	mode int // 0: cannot open, 1: every write fails, 2: writes after the first fail
}

type failingDirect struct {
	vfs.DirectFile
	ok *atomic.Int64 // writes that go through
}

func (f failingDirect) WriteAt(p []byte, off int64) (int, error) {
	if f.ok.Add(-1) >= 0 {
		return f.DirectFile.WriteAt(p, off)
	}
	return 0, &fs.PathError{Op: "write", Path: "segment", Err: syscall.EINVAL}
}

func (f noDirectFS) OpenDirect(name string) (vfs.DirectFile, error) {
	if f.mode == 0 {
		return nil, errors.ErrUnsupported
	}
	df, err := f.FS.OpenDirect(name)
	ok := new(atomic.Int64)
	if f.mode == 2 {
		ok.Store(1)
	}
	return failingDirect{df, ok}, err
}

// TestDirectFallsBackToThePageCache: where the file system cannot write
// directly, its first direct write fails, or a later one is refused with
// EINVAL, the log writes through the page cache and fsyncs, and every
// acknowledged record survives a power loss.
func TestDirectFallsBackToThePageCache(t *testing.T) {
	for mode := range 3 {
		fs := strictfs.New()
		opts := durOptions(fs)
		opts.NoDirect = false
		opts.SegmentBytes = 4 << 10
		opts.FS = noDirectFS{fs, mode}
		l := durOpen(t, opts)
		if mode == 2 && !l.Direct() {
			t.Fatal("mode 2: the log does not write directly after its first direct write went through")
		}
		var acked []durRec
		for i := range 20 {
			acked = append(acked, durAppend(t, l, []cmdlog.Entry{{Partition: uint32(i % 4), Data: make([]byte, 300+i)}})...)
			if l.df != nil || l.Direct() {
				t.Fatalf("mode %d, append %d: the log writes directly", mode, i)
			}
		}
		if durSegCount(l) < 2 {
			t.Fatal("the log did not roll: a new segment's fallback is not exercised")
		}
		opts.FS = fs.Restart(nil, 0)
		l2 := durOpen(t, opts)
		durCheck(t, fmt.Sprintf("mode %d, after a power loss", mode), durReplay(t, l2), acked, nil)
		l2.Close()
		l.Close()
	}
}
