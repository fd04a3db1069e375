package wal

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/surge-run/surge/internal/cmdlog"
	"github.com/surge-run/surge/internal/vfs/strictfs"
)

// aheadCheck fails unless the segment file b (base position base, header
// hdr) holds the log up to end and then zeros, more than none and at most
// aheadStep of them, and none past the segment's size limit segBytes.
func aheadCheck(t *testing.T, what string, b []byte, hdr int64, base, end uint64, segBytes int64) {
	t.Helper()
	logEnd := hdr + int64(end-base)
	if end == base && int64(len(b)) == hdr {
		return // rolled by a seal: nothing written to it yet
	}
	if logEnd >= hdr+segBytes && int64(len(b)) == logEnd {
		return // full: the next write goes to a new segment
	}
	if int64(len(b)) > max(logEnd, hdr+segBytes) {
		t.Fatalf("%s: file of %d bytes, zeros past the segment's limit (%d)", what, len(b), hdr+segBytes)
	}
	if int64(len(b)) <= logEnd || int64(len(b))-logEnd > aheadStep {
		t.Fatalf("%s: file of %d bytes, log ends at offset %d: want between 1 and %d bytes written ahead", what, len(b), logEnd, aheadStep)
	}
	if !isZeroTail(b[logEnd:]) {
		t.Fatalf("%s: the bytes written ahead of the log's end are not all zeros", what)
	}
}

// TestWriterKeepsBlocksWrittenAhead: after every group commit the active
// segment's file reaches past the log's end by at most aheadStep, all of it
// zeros, and all of it synced by that commit's one fsync (a power loss
// keeps it). A segment that rolled keeps its zeros. Old code: the file
// ended at the log's end, so every fsync extended it.
func TestWriterKeepsBlocksWrittenAhead(t *testing.T) {
	fs := strictfs.New()
	opts := durOptions(fs)
	opts.SegmentBytes = 3 << 20
	var syncs atomic.Int64
	fs.SetHook(func(op strictfs.Op) {
		if op.Kind == strictfs.OpSync {
			syncs.Add(1)
		}
	})
	l := durOpen(t, opts)
	defer l.Close()
	rng := rand.New(rand.NewPCG(4, 2))
	hdr := l.hdrSize
	// Sizes that land just short of, exactly on, and across step
	// boundaries, and writes longer than a step.
	sizes := []int{100, 8 << 10, aheadStep - 2000, 1500 - frameHeaderSize, 3 * aheadStep / 2, 40 << 10, 2*aheadStep + 7, 512}
	for i := 0; i < 40; i++ {
		seg := durLastSeg(l)
		n := sizes[i%len(sizes)]
		if i%len(sizes) == 3 {
			// Make this write end exactly on a step boundary of the file.
			n = int((hdr+int64(uint64(l.End())-seg.base))/aheadStep+1)*aheadStep - int(hdr+int64(uint64(l.End())-seg.base)) - frameHeaderSize
		}
		d := make([]byte, n)
		for j := range d {
			d[j] = byte(rng.Uint32()) | 1
		}
		before := syncs.Load()
		durAppend(t, l, []cmdlog.Entry{{Partition: uint32(i % 4), Data: d}})
		if s := syncs.Load() - before; s != 1 && durLastSeg(l).base == seg.base {
			t.Fatalf("append %d: %d fsyncs, want 1 (the zeros go with the commit)", i, s)
		}
		seg = durLastSeg(l)
		b, err := fs.ReadFile(seg.path)
		if err != nil {
			t.Fatal(err)
		}
		aheadCheck(t, fmt.Sprintf("append %d", i), b, hdr, seg.base, uint64(l.End()), opts.SegmentBytes)
		synced, err := fs.Restart(nil, 0).ReadFile(seg.path)
		if err != nil || string(synced) != string(b) {
			t.Fatalf("append %d: the zeros written ahead are not durable with the commit", i)
		}
	}
	l.segMu.Lock()
	segs := append([]segment(nil), l.segs...)
	l.segMu.Unlock()
	if len(segs) < 3 {
		t.Fatalf("only %d segments: the test does not roll", len(segs))
	}
	for i := 0; i+1 < len(segs); i++ {
		b, err := fs.ReadFile(segs[i].path)
		if err != nil {
			t.Fatal(err)
		}
		aheadCheck(t, "rolled "+segs[i].path, b, hdr, segs[i].base, segs[i+1].base, opts.SegmentBytes)
	}
}

// TestPowerLossWithZeroTail: a power loss after any acknowledged commit
// (sealed or not, before and after rolls) leaves the zeros written ahead
// after the last frame. Open must keep every record, report nothing and
// rewrite no file; appends then continue over the zeros and survive
// another power loss. Old code: no zeros were written ahead (the test
// checks they are there); a tail of zeros was cut by a rewrite and
// reported (see TestTornTail "zeros appended").
func TestPowerLossWithZeroTail(t *testing.T) {
	fs := strictfs.New()
	opts := durOptions(fs)
	opts.SegmentBytes = 1 << 20
	l := durOpen(t, opts)
	defer l.Close()
	rng := rand.New(rand.NewPCG(7, 7))
	var acked []durRec
	for i := 0; i < 30; i++ {
		acked = append(acked, durAppend(t, l, durEntries(rng, 1+rng.IntN(3), 0, 90<<10))...)
		if i%3 == 2 {
			if err := l.Seal(); err != nil {
				t.Fatal(err)
			}
		}
		seg, end := durLastSeg(l), uint64(l.End())
		g := fs.Restart(nil, 0)
		b, err := g.ReadFile(seg.path)
		if err != nil {
			t.Fatal(err)
		}
		what := fmt.Sprintf("commit %d", i)
		aheadCheck(t, what, b, l.hdrSize, seg.base, end, opts.SegmentBytes)
		reopenUnchanged(t, what, g, acked)
	}
	if durSegCount(l) < 3 {
		t.Fatal("the log did not roll: non-last segments with zeros were not reopened")
	}
}

// TestCrashMidCommitWithZeroTail: the power fails at each operation of a
// group commit (its frames' write, its zeros' write, its fsync), after
// commits that left zeros written ahead, some of them about to extend the
// zeros. Only synced state survives, so the failed commit left nothing but
// zeros: Open keeps every acknowledged record, reports nothing and rewrites
// nothing, and the log goes on. Old code: no zeros were written ahead.
func TestCrashMidCommitWithZeroTail(t *testing.T) {
	for commits := 1; commits <= 8; commits++ {
		for k := int64(1); k <= 4; k++ {
			what := fmt.Sprintf("%d commits, crash at op %d of the next", commits, k)
			fs := strictfs.New()
			l := durOpen(t, durOptions(fs))
			rng := rand.New(rand.NewPCG(uint64(commits), 3))
			var acked []durRec
			for range commits {
				acked = append(acked, durAppend(t, l, durEntries(rng, 1+rng.IntN(3), 0, 200<<10))...)
			}
			seg, end := durLastSeg(l), uint64(l.End())
			b, err := fs.ReadFile(seg.path)
			if err != nil {
				t.Fatal(err)
			}
			aheadCheck(t, what, b, l.hdrSize, seg.base, end, defaultSegmentBytes)
			fs.CrashAt(fs.Ops()+k, nil)
			next := durEntries(rng, 2, 100<<10, 300<<10)
			if d := <-durAppendAsync(l, next); d.err == nil {
				acked = append(acked, durRecs(d.first, next)...)
			}
			l.Close()
			reopenUnchanged(t, what, fs.Restart(nil, 0), acked)
		}
	}
}

// reopenUnchanged opens the log on g, which must need no repair, checks
// that it holds exactly acked, appends, and checks that the append
// survives another power loss.
func reopenUnchanged(t *testing.T, what string, g *strictfs.FS, acked []durRec) {
	t.Helper()
	var rewrites atomic.Int64
	g.SetHook(func(op strictfs.Op) {
		if op.Kind == strictfs.OpCreate || op.Kind == strictfs.OpRename || op.Kind == strictfs.OpRemove {
			rewrites.Add(1)
		}
	})
	opts := durOptions(g)
	opts.SegmentBytes = 1 << 20
	l := durOpen(t, opts)
	if r := l.Recovery(); r != (Recovery{}) || rewrites.Load() != 0 {
		t.Fatalf("%s: Open reported %+v and made %d file changes, want none", what, r, rewrites.Load())
	}
	g.SetHook(nil)
	durCheck(t, what, durReplay(t, l), acked, nil)
	more := durAppend(t, l, []cmdlog.Entry{{Partition: 1, Data: []byte("after the zeros")}})
	l.Close()
	l2 := durOpen(t, durOptions(g.Restart(nil, 0)))
	defer l2.Close()
	durCheck(t, what+", second power loss", durReplay(t, l2), append(acked[:len(acked):len(acked)], more...), nil)
}

// zeroTailLog builds a log of several segments on disk, closed, and returns
// its records and files.
func zeroTailLog(t *testing.T) (Options, []rec, []string) {
	t.Helper()
	dir := t.TempDir()
	opts := Options{Partitions: 8, SealDelay: -1, Dir: dir, SegmentBytes: 1 << 10, NoSync: true}
	want := buildLog(t, opts, 80, 21)
	files := segFiles(t, dir)
	if len(files) < 3 {
		t.Fatalf("%d segments", len(files))
	}
	if path, _ := fileOffset(t, dir, want[len(want)-1].pos); path != files[len(files)-1] {
		t.Fatal("Close rolled: the last segment holds no record")
	}
	if st, err := os.Stat(files[len(files)-1]); err != nil || st.Size() <= logEndOffset(t, opts, files, len(files)-1, want) {
		t.Fatal("no zeros written ahead in the last segment")
	}
	return opts, want, files
}

// logEndOffset is the file offset where the frames of segment i end.
func logEndOffset(t *testing.T, opts Options, files []string, i int, want []rec) int64 {
	t.Helper()
	if i+1 < len(files) {
		return segmentHeaderSize(8) + int64(segBase(t, files[i+1])-segBase(t, files[i]))
	}
	last := want[len(want)-1]
	_, off := fileOffset(t, opts.Dir, last.pos)
	return off + int64(frameLen(last)) + frameHeaderSize // Close's seal
}

func wantCorruption(t *testing.T, opts Options, file string) *CorruptionError {
	t.Helper()
	_, err := Open(opts)
	var ce *CorruptionError
	if !errors.As(err, &ce) || ce.File != file {
		t.Fatalf("Open = %v, want a CorruptionError naming %s", err, file)
	}
	return ce
}

// TestZeroTailInNonLastSegment: a segment that is not the last may end in
// zeros written ahead (the writer caps them at the segment's size limit, so
// this happens when the limit was lowered between runs): its frames end
// where the next segment's base says, and Open accepts it as it is. Old
// code: any bad frame in a non-last segment was corruption.
func TestZeroTailInNonLastSegment(t *testing.T) {
	opts, want, files := zeroTailLog(t)
	for _, f := range files[:len(files)-1] {
		appendToFile(t, f, make([]byte, 5000))
	}
	l := openLog(t, opts)
	if r := l.Recovery(); r != (Recovery{}) {
		t.Fatalf("Recovery = %+v, want none", r)
	}
	checkRecs(t, replayAll(t, l, 0), want)
	more := appendWait(t, l, []cmdlog.Entry{{Partition: 1, Data: []byte("after")}, {Partition: 5, Data: []byte("the zeros")}})
	closeLog(t, l)
	l = openLog(t, opts)
	defer closeLog(t, l)
	checkRecs(t, replayAll(t, l, 0), append(want, more...))
}

// TestZeroTailDoesNotHideDamage: damage that was corruption, or a torn
// write cut and reported, stays so when zeros were written ahead.
func TestZeroTailDoesNotHideDamage(t *testing.T) {
	t.Run("acknowledged record damaged in the last segment", func(t *testing.T) {
		opts, want, files := zeroTailLog(t)
		path, off := fileOffset(t, opts.Dir, want[len(want)-1].pos)
		if path != files[len(files)-1] {
			t.Fatal("record not in the last segment")
		}
		flipByte(t, path, off+frameHeaderSize-1)
		if ce := wantCorruption(t, opts, path); ce.Offset != off {
			t.Fatalf("corruption at %d, want %d", ce.Offset, off)
		}
	})
	t.Run("last acknowledged write zeroed, its seal kept", func(t *testing.T) {
		opts, want, files := zeroTailLog(t)
		last := want[len(want)-1]
		path, off := fileOffset(t, opts.Dir, last.pos)
		if path != files[len(files)-1] {
			t.Fatal("last record not in the last segment")
		}
		if err := writeAt(path, make([]byte, frameLen(last)), off); err != nil {
			t.Fatal(err)
		}
		if ce := wantCorruption(t, opts, path); ce.Offset != off {
			t.Fatalf("corruption at %d, want %d", ce.Offset, off)
		}
	})
	t.Run("garbage in the zeros of the last segment", func(t *testing.T) {
		opts, want, files := zeroTailLog(t)
		path := files[len(files)-1]
		end := logEndOffset(t, opts, files, len(files)-1, want)
		st, _ := os.Stat(path)
		if err := writeAt(path, []byte{0x5a}, end+(st.Size()-end)/2); err != nil {
			t.Fatal(err)
		}
		l := openLog(t, opts)
		defer closeLog(t, l)
		if r := l.Recovery(); r.File != path || r.TruncatedBytes != st.Size()-end {
			t.Fatalf("Recovery = %+v, want %s cut by %d", r, path, st.Size()-end)
		}
		checkRecs(t, replayAll(t, l, 0), want)
	})
	t.Run("zero tail longer than the limit in the last segment", func(t *testing.T) {
		opts, want, files := zeroTailLog(t)
		path := files[len(files)-1]
		end := logEndOffset(t, opts, files, len(files)-1, want)
		if err := os.Truncate(path, end+maxZeroTail+1); err != nil {
			t.Fatal(err)
		}
		l := openLog(t, opts)
		defer closeLog(t, l)
		if r := l.Recovery(); r.File != path || r.TruncatedBytes != maxZeroTail+1 {
			t.Fatalf("Recovery = %+v, want %s cut by %d", r, path, maxZeroTail+1)
		}
		checkRecs(t, replayAll(t, l, 0), want)
	})
	t.Run("non-last segment with a non-zero tail", func(t *testing.T) {
		opts, want, files := zeroTailLog(t)
		end := logEndOffset(t, opts, files, 0, want)
		if err := writeAt(files[0], []byte{1}, end+100); err != nil {
			t.Fatal(err)
		}
		if ce := wantCorruption(t, opts, files[0]); ce.Offset != end {
			t.Fatalf("corruption at %d, want %d", ce.Offset, end)
		}
	})
	t.Run("non-last segment with a zero tail longer than the limit", func(t *testing.T) {
		opts, want, files := zeroTailLog(t)
		end := logEndOffset(t, opts, files, 0, want)
		if err := os.Truncate(files[0], end+maxZeroTail+1); err != nil {
			t.Fatal(err)
		}
		wantCorruption(t, opts, files[0])
	})
	t.Run("non-last segment whose last records are zeroed", func(t *testing.T) {
		// The zeros reach back before the next segment's base: records
		// the next segment's header says were there are gone.
		opts, want, files := zeroTailLog(t)
		end := logEndOffset(t, opts, files, 0, want)
		i := 0
		for uint64(want[i+1].pos) < segBase(t, files[1]) {
			i++
		}
		_, off := fileOffset(t, opts.Dir, want[i].pos)
		if err := writeAt(files[0], make([]byte, end-off), off); err != nil {
			t.Fatal(err)
		}
		ce := wantCorruption(t, opts, files[1])
		if !strings.Contains(ce.Reason, "previous segment ends") {
			t.Fatalf("reason %q", ce.Reason)
		}
	})
	t.Run("non-last segment whose frames run past the next base", func(t *testing.T) {
		// A valid frame (right log id and position) in the first
		// segment's zeros, at the next segment's base.
		opts, want, files := zeroTailLog(t)
		end := logEndOffset(t, opts, files, 0, want)
		b, err := os.ReadFile(files[0])
		if err != nil {
			t.Fatal(err)
		}
		frame := appendFrame(nil, fileSalt(b), segBase(t, files[1]), 0, 2, []byte("past the base"))
		if err := writeAt(files[0], frame, end); err != nil {
			t.Fatal(err)
		}
		ce := wantCorruption(t, opts, files[1])
		if !strings.Contains(ce.Reason, "previous segment ends") {
			t.Fatalf("reason %q", ce.Reason)
		}
	})
}

func writeAt(path string, b []byte, off int64) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(b, off); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
