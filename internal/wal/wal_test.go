package wal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/surge-run/surge/internal/cmdlog"
)

type rec struct {
	pos  cmdlog.Position
	part uint32
	data []byte
}

func frameLen(r rec) uint64 { return uint64(frameHeaderSize + len(r.data)) }

func openLog(t testing.TB, opts Options) *Log {
	t.Helper()
	l, err := Open(opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return l
}

func closeLog(t testing.TB, l *Log) {
	t.Helper()
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// appendWait appends entries and waits until they are durable, returning the
// records as the log placed them.
func appendWait(t testing.TB, l *Log, entries []cmdlog.Entry) []rec {
	t.Helper()
	type res struct {
		first, end cmdlog.Position
		err        error
	}
	ch := make(chan res, 1)
	l.Append(entries, func(first, end cmdlog.Position, err error) { ch <- res{first, end, err} })
	r := <-ch
	if r.err != nil {
		t.Fatalf("append: %v", r.err)
	}
	out := make([]rec, 0, len(entries))
	pos := r.first
	for _, e := range entries {
		out = append(out, rec{pos: pos, part: e.Partition, data: e.Data})
		pos += cmdlog.Position(frameHeaderSize + len(e.Data))
	}
	if pos != r.end {
		t.Fatalf("append: end = %d, want %d", r.end, pos)
	}
	return out
}

func replayAll(t testing.TB, l *Log, from cmdlog.Position) []rec {
	t.Helper()
	var out []rec
	err := l.Replay(from, func(pos cmdlog.Position, e cmdlog.Entry) error {
		out = append(out, rec{pos: pos, part: e.Partition, data: bytes.Clone(e.Data)})
		return nil
	})
	if err != nil {
		t.Fatalf("Replay(%d): %v", from, err)
	}
	return out
}

func checkRecs(t testing.TB, got, want []rec) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d records, want %d", len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.pos != w.pos || g.part != w.part || !bytes.Equal(g.data, w.data) {
			t.Fatalf("record %d: got pos=%d part=%d len=%d, want pos=%d part=%d len=%d",
				i, g.pos, g.part, len(g.data), w.pos, w.part, len(w.data))
		}
	}
}

func randEntries(rng *rand.Rand, n, maxSize int) []cmdlog.Entry {
	es := make([]cmdlog.Entry, n)
	for i := range es {
		d := make([]byte, rng.Intn(maxSize+1))
		rng.Read(d)
		es[i] = cmdlog.Entry{Partition: uint32(rng.Intn(8)), Data: d}
	}
	return es
}

func segFiles(t testing.TB, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.wal"))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(m)
	return m
}

func segBase(t testing.TB, path string) uint64 {
	t.Helper()
	b, ok := parseSegmentName(filepath.Base(path))
	if !ok {
		t.Fatalf("bad segment name %s", path)
	}
	return b
}

// fileOffset maps a position to the byte offset in its segment file.
func fileOffset(t testing.TB, dir string, pos cmdlog.Position) (string, int64) {
	t.Helper()
	files := segFiles(t, dir)
	for i := len(files) - 1; i >= 0; i-- {
		if b := segBase(t, files[i]); b <= uint64(pos) {
			return files[i], segmentHeaderSize(8) + int64(uint64(pos)-b)
		}
	}
	t.Fatalf("no segment holds position %d", pos)
	return "", 0
}

func flipByte(t testing.TB, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x5a
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func TestRoundTripAcrossSegments(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewSource(1))
	l := openLog(t, Options{Partitions: 8, SealDelay: -1, Dir: dir, SegmentBytes: 1024, NoSync: true})
	var want []rec
	for i := 0; i < 200; i++ {
		want = append(want, appendWait(t, l, randEntries(rng, 1+rng.Intn(3), 100))...)
	}
	if n := len(segFiles(t, dir)); n < 5 {
		t.Fatalf("expected several segments, got %d", n)
	}
	checkRecs(t, replayAll(t, l, 0), want)
	end := l.End()
	last := want[len(want)-1]
	if uint64(end) != uint64(last.pos)+frameLen(last) {
		t.Fatalf("End = %d, want %d", end, uint64(last.pos)+frameLen(last))
	}
	closeLog(t, l)

	l = openLog(t, Options{Partitions: 8, SealDelay: -1, Dir: dir, SegmentBytes: 1024, NoSync: true})
	defer closeLog(t, l)
	// Close sealed the log: one empty frame after the last record.
	end += frameHeaderSize
	if l.End() != end {
		t.Fatalf("End after reopen = %d, want %d", l.End(), end)
	}
	if r := l.Recovery(); r.TruncatedBytes != 0 {
		t.Fatalf("clean reopen truncated %+v", r)
	}
	checkRecs(t, replayAll(t, l, 0), want)
	more := appendWait(t, l, randEntries(rng, 5, 100))
	if more[0].pos != end {
		t.Fatalf("first append after reopen at %d, want %d", more[0].pos, end)
	}
	want = append(want, more...)
	checkRecs(t, replayAll(t, l, 0), want)
}

func TestReplayFromPositions(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewSource(2))
	l := openLog(t, Options{Partitions: 8, SealDelay: -1, Dir: dir, SegmentBytes: 700, NoSync: true})
	defer closeLog(t, l)
	var want []rec
	for i := 0; i < 60; i++ {
		want = append(want, appendWait(t, l, randEntries(rng, 1+rng.Intn(2), 80))...)
	}
	for i := range want {
		checkRecs(t, replayAll(t, l, want[i].pos), want[i:])
	}
	if got := replayAll(t, l, l.End()); len(got) != 0 {
		t.Fatalf("Replay(End) returned %d records", len(got))
	}
	noop := func(cmdlog.Position, cmdlog.Entry) error { return nil }
	if err := l.Replay(l.End()+1, noop); err == nil {
		t.Fatal("Replay past End succeeded")
	}
	// A position inside a frame is not a record boundary.
	var mid cmdlog.Position
	for _, r := range want {
		if len(r.data) > 8 {
			mid = r.pos + 5
			break
		}
	}
	err := l.Replay(mid, noop)
	var ce *CorruptionError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "record boundary") {
		t.Fatalf("Replay(mid-frame) = %v, want error about record boundary", err)
	}
	// fn's error stops the replay and is returned as is.
	stop := errors.New("stop")
	calls := 0
	err = l.Replay(0, func(cmdlog.Position, cmdlog.Entry) error {
		calls++
		if calls == 3 {
			return stop
		}
		return nil
	})
	if err != stop || calls != 3 {
		t.Fatalf("Replay with failing fn: err=%v calls=%d", err, calls)
	}
}

func TestConcurrentAppends(t *testing.T) {
	dir := t.TempDir()
	var syncs, synced atomic.Int64
	l := openLog(t, Options{Partitions: 8, SealDelay: -1, Dir: dir, SegmentBytes: 16 << 10, QueueLen: 64,
		OnSync: func(d time.Duration, records, bytes int) { syncs.Add(1); synced.Add(int64(records)) }})

	const workers, perWorker = 8, 60
	type ack struct {
		worker, seq int
		first, end  cmdlog.Position
	}
	// Written only from done callbacks: the race detector checks that they
	// all run on one goroutine (or are otherwise ordered).
	var acks []ack
	var prevEnd cmdlog.Position
	var orderErr error
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var inner sync.WaitGroup
			for s := 0; s < perWorker; s++ {
				n := 1 + s%3
				es := make([]cmdlog.Entry, n)
				for k := range es {
					es[k] = cmdlog.Entry{Partition: uint32(w), Data: []byte(fmt.Sprintf("w%d-s%d-k%d", w, s, k))}
				}
				inner.Add(1)
				l.Append(es, func(first, end cmdlog.Position, err error) {
					defer inner.Done()
					if err != nil && orderErr == nil {
						orderErr = err
					}
					if first != prevEnd && orderErr == nil {
						orderErr = fmt.Errorf("done out of order: first=%d, previous end=%d", first, prevEnd)
					}
					prevEnd = end
					acks = append(acks, ack{w, s, first, end})
				})
			}
			inner.Wait()
		}()
	}
	wg.Wait()
	if orderErr != nil {
		t.Fatal(orderErr)
	}
	if len(acks) != workers*perWorker {
		t.Fatalf("%d acks, want %d", len(acks), workers*perWorker)
	}
	if l.End() != prevEnd {
		t.Fatalf("End = %d, last acked end = %d", l.End(), prevEnd)
	}
	closeLog(t, l)
	total := int64(workers * perWorker * 2) // entries per append cycle 1,2,3 averages 2
	if synced.Load() != total || syncs.Load() == 0 {
		t.Fatalf("OnSync saw %d records in %d syncs, want %d records", synced.Load(), syncs.Load(), total)
	}
	t.Logf("%d appends in %d fsyncs", workers*perWorker, syncs.Load())

	l = openLog(t, Options{Partitions: 8, SealDelay: -1, Dir: dir, SegmentBytes: 16 << 10})
	defer closeLog(t, l)
	got := replayAll(t, l, 0)
	byPos := map[cmdlog.Position]rec{}
	for _, r := range got {
		byPos[r.pos] = r
	}
	lastSeq := make([]int, workers)
	for i := range lastSeq {
		lastSeq[i] = -1
	}
	for _, a := range acks {
		if a.seq <= lastSeq[a.worker] {
			t.Fatalf("worker %d: append %d acked after %d", a.worker, a.seq, lastSeq[a.worker])
		}
		lastSeq[a.worker] = a.seq
		pos := a.first
		for k := 0; pos < a.end; k++ {
			r, ok := byPos[pos]
			want := fmt.Sprintf("w%d-s%d-k%d", a.worker, a.seq, k)
			if !ok || string(r.data) != want || r.part != uint32(a.worker) {
				t.Fatalf("at %d: got %q, want %q", pos, r.data, want)
			}
			pos += cmdlog.Position(frameLen(r))
		}
	}
	if int64(len(got)) != total {
		t.Fatalf("replayed %d records, want %d", len(got), total)
	}
}

func TestCloseFlushesAndRejects(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, Options{Partitions: 8, SealDelay: -1, Dir: dir, QueueLen: 16})
	const n = 300
	var acked atomic.Int64
	appender := make(chan struct{})
	go func() {
		defer close(appender)
		for i := 0; i < n; i++ {
			l.Append([]cmdlog.Entry{{Partition: 1, Data: []byte("x")}}, func(_, _ cmdlog.Position, err error) {
				if err == nil {
					acked.Add(1)
				}
			})
		}
	}()
	for acked.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	closeLog(t, l)
	// Every append that got in before Close was flushed; the rest got
	// ErrClosed. Either way, none is left hanging once Close returns.
	got := acked.Load()
	var closedErr error
	l.Append([]cmdlog.Entry{{Data: []byte("late")}}, func(_, _ cmdlog.Position, err error) { closedErr = err })
	if !errors.Is(closedErr, cmdlog.ErrClosed) {
		t.Fatalf("Append after Close: err = %v, want ErrClosed", closedErr)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	<-appender
	l2 := openLog(t, Options{Partitions: 8, SealDelay: -1, Dir: dir})
	defer closeLog(t, l2)
	if r := replayAll(t, l2, 0); int64(len(r)) < got {
		t.Fatalf("replayed %d records, %d were acknowledged", len(r), got)
	}
}

func TestCloseWaitsForQueued(t *testing.T) {
	l := openLog(t, Options{Partitions: 8, SealDelay: -1, Dir: t.TempDir(), QueueLen: 1000})
	var acked atomic.Int64
	for i := 0; i < 500; i++ {
		l.Append([]cmdlog.Entry{{Data: []byte("y")}}, func(_, _ cmdlog.Position, err error) {
			if err != nil {
				t.Error(err)
			}
			acked.Add(1)
		})
	}
	closeLog(t, l)
	if acked.Load() != 500 {
		t.Fatalf("%d of 500 dones called before Close returned", acked.Load())
	}
}

func TestEntryTooLarge(t *testing.T) {
	l := openLog(t, Options{Partitions: 8, SealDelay: -1, Dir: t.TempDir(), NoSync: true})
	defer closeLog(t, l)
	var order []int
	var errs [3]error
	var wg sync.WaitGroup
	wg.Add(3)
	for i, size := range []int{10, MaxEntryBytes + 1, 10} {
		l.Append([]cmdlog.Entry{{Data: make([]byte, size)}}, func(_, _ cmdlog.Position, err error) {
			order = append(order, i)
			errs[i] = err
			wg.Done()
		})
	}
	wg.Wait()
	if !slices.Equal(order, []int{0, 1, 2}) {
		t.Fatalf("done order %v", order)
	}
	if errs[0] != nil || errs[2] != nil || !errors.Is(errs[1], ErrEntryTooLarge) {
		t.Fatalf("errors = %v", errs)
	}
	if got := replayAll(t, l, 0); len(got) != 2 {
		t.Fatalf("replayed %d records, want 2", len(got))
	}
}

func TestWriteFailureFailsLog(t *testing.T) {
	l := openLog(t, Options{Partitions: 8, SealDelay: -1, Dir: t.TempDir()})
	appendWait(t, l, []cmdlog.Entry{{Data: []byte("ok")}})
	end := l.End()
	l.f.Close() // make the writer's next write fail
	errc := make(chan error, 2)
	for i := 0; i < 2; i++ {
		l.Append([]cmdlog.Entry{{Data: []byte("lost")}}, func(_, _ cmdlog.Position, err error) { errc <- err })
	}
	for i := 0; i < 2; i++ {
		if err := <-errc; err == nil {
			t.Fatal("append after write failure succeeded")
		}
	}
	if l.End() != end {
		t.Fatalf("End moved to %d after a failed write", l.End())
	}
	if err := l.Close(); err == nil {
		t.Fatal("Close of a failed log returned nil")
	}
}

func TestTornTail(t *testing.T) {
	type damage func(t *testing.T, path string, last rec, lastOff int64) (keepLast bool)
	cases := map[string]damage{
		"truncate mid data": func(t *testing.T, path string, last rec, off int64) bool {
			if err := os.Truncate(path, off+frameHeaderSize+int64(len(last.data))/2); err != nil {
				t.Fatal(err)
			}
			return false
		},
		"truncate mid header": func(t *testing.T, path string, last rec, off int64) bool {
			if err := os.Truncate(path, off+5); err != nil {
				t.Fatal(err)
			}
			return false
		},
		"bad checksum in last record, seal lost": func(t *testing.T, path string, last rec, off int64) bool {
			// Power failed before the seal after the last write reached
			// the disk: nothing proves that write was acknowledged.
			if err := os.Truncate(path, off+frameHeaderSize+int64(len(last.data))); err != nil {
				t.Fatal(err)
			}
			flipByte(t, path, off+frameHeaderSize+1)
			return false
		},
		"garbage appended": func(t *testing.T, path string, last rec, off int64) bool {
			g := make([]byte, 3000)
			rand.New(rand.NewSource(7)).Read(g)
			appendToFile(t, path, g)
			return true
		},
		"zeros appended": func(t *testing.T, path string, last rec, off int64) bool {
			// More zeros after those written ahead: the same cut as before,
			// but zeros are what the writer leaves, so no report or rewrite.
			appendToFile(t, path, make([]byte, 8192))
			return true
		},
		"truncated frame then zeros": func(t *testing.T, path string, last rec, off int64) bool {
			if err := os.Truncate(path, off+7); err != nil {
				t.Fatal(err)
			}
			appendToFile(t, path, make([]byte, 4096))
			return false
		},
	}
	for name, dmg := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			rng := rand.New(rand.NewSource(3))
			opts := Options{Partitions: 8, SealDelay: -1, Dir: dir, SegmentBytes: 2048, NoSync: true}
			l := openLog(t, opts)
			var want []rec
			for i := 0; i < 40; i++ {
				want = append(want, appendWait(t, l, randEntries(rng, 1, 120))...)
			}
			want = append(want, appendWait(t, l, []cmdlog.Entry{{Partition: 3, Data: bytes.Repeat([]byte("z"), 50)}})...)
			closeLog(t, l)
			end := l.End()

			last := want[len(want)-1]
			path, off := fileOffset(t, dir, last.pos)
			if files := segFiles(t, dir); path != files[len(files)-1] {
				t.Fatalf("last record not in last segment")
			}
			// The file goes on past the log's end with the zeros written
			// ahead; a cut starts at the log's end.
			logEnd := off + int64(end-last.pos)
			keep := dmg(t, path, last, off)
			damaged, _ := os.Stat(path)
			wantTrunc := damaged.Size() - logEnd
			if name == "zeros appended" {
				wantTrunc = 0
			}
			if !keep {
				want = want[:len(want)-1]
				wantTrunc = damaged.Size() - off
			}

			l = openLog(t, opts)
			r := l.Recovery()
			if wantTrunc == 0 && r != (Recovery{}) || wantTrunc != 0 && (r.File != path || r.TruncatedBytes != wantTrunc) {
				t.Fatalf("Recovery = %+v, want file %s truncated by %d", r, path, wantTrunc)
			}
			checkRecs(t, replayAll(t, l, 0), want)
			more := appendWait(t, l, randEntries(rng, 3, 50))
			want = append(want, more...)
			checkRecs(t, replayAll(t, l, 0), want)
			checkRecs(t, replayAll(t, l, more[0].pos), more)
			closeLog(t, l)

			l = openLog(t, opts)
			defer closeLog(t, l)
			if r := l.Recovery(); r.TruncatedBytes != 0 {
				t.Fatalf("second reopen truncated again: %+v", r)
			}
			checkRecs(t, replayAll(t, l, 0), want)
		})
	}
}

func appendToFile(t *testing.T, path string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
}

// buildLog writes n single-entry appends and returns the records.
func buildLog(t *testing.T, opts Options, n int, seed int64) []rec {
	t.Helper()
	rng := rand.New(rand.NewSource(seed))
	l := openLog(t, opts)
	defer closeLog(t, l)
	var want []rec
	for i := 0; i < n; i++ {
		want = append(want, appendWait(t, l, randEntries(rng, 1, 100))...)
	}
	return want
}

func TestCorruptionInMiddle(t *testing.T) {
	for _, field := range []string{"data", "length"} {
		t.Run(field, func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{Partitions: 8, SealDelay: -1, Dir: dir, NoSync: true}
			want := buildLog(t, opts, 30, 4)
			victim := want[10]
			path, off := fileOffset(t, dir, victim.pos)
			if field == "data" {
				flipByte(t, path, off+frameHeaderSize)
			} else {
				flipByte(t, path, off+3) // length becomes huge
			}
			_, err := Open(opts)
			var ce *CorruptionError
			if !errors.As(err, &ce) {
				t.Fatalf("Open = %v, want *CorruptionError", err)
			}
			if ce.File != path || ce.Offset != off {
				t.Fatalf("CorruptionError at %s:%d, want %s:%d", ce.File, ce.Offset, path, off)
			}
			msg := err.Error()
			if !strings.Contains(msg, path) || !strings.Contains(msg, fmt.Sprintf("offset %d", off)) {
				t.Fatalf("error %q does not name file and offset", msg)
			}
			t.Log(msg)
		})
	}
}

func TestCorruptionInNonLastSegment(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Partitions: 8, SealDelay: -1, Dir: dir, SegmentBytes: 512, NoSync: true}
	want := buildLog(t, opts, 40, 5)
	files := segFiles(t, dir)
	if len(files) < 3 {
		t.Fatalf("want several segments, got %d", len(files))
	}
	// The last record of the first segment: nothing valid follows it in
	// that file, yet it is corruption because the segment is not the last.
	second := segBase(t, files[1])
	var victim rec
	for _, r := range want {
		if uint64(r.pos) < second {
			victim = r
		}
	}
	path, off := fileOffset(t, dir, victim.pos)
	if path != files[0] {
		t.Fatalf("victim in %s", path)
	}
	flipByte(t, path, off+frameHeaderSize-1)
	_, err := Open(opts)
	var ce *CorruptionError
	if !errors.As(err, &ce) || ce.File != files[0] || ce.Offset != off {
		t.Fatalf("Open = %v, want CorruptionError in %s at %d", err, files[0], off)
	}

	// Truncating a non-last segment is corruption too.
	flipByte(t, path, off+frameHeaderSize-1)
	if err := os.Truncate(path, off+3); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(opts); !errors.As(err, &ce) || ce.File != files[0] {
		t.Fatalf("Open = %v, want CorruptionError in %s", err, files[0])
	}
}

func TestMissingSegment(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Partitions: 8, SealDelay: -1, Dir: dir, SegmentBytes: 512, NoSync: true}
	buildLog(t, opts, 40, 6)
	files := segFiles(t, dir)
	os.Remove(files[1])
	_, err := Open(opts)
	var ce *CorruptionError
	if !errors.As(err, &ce) || ce.File != files[2] {
		t.Fatalf("Open = %v, want CorruptionError naming %s", err, files[2])
	}
}

func TestUnknownSegmentVersion(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Partitions: 8, SealDelay: -1, Dir: dir, SegmentBytes: 512, NoSync: true}
	buildLog(t, opts, 20, 7)
	path := segFiles(t, dir)[0]
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	var v [4]byte
	binary.LittleEndian.PutUint32(v[:], 7)
	f.WriteAt(v[:], 8)
	f.Close()
	_, err = Open(opts)
	if !errors.Is(err, ErrUnsupportedVersion) || !strings.Contains(err.Error(), "version 7") || !strings.Contains(err.Error(), path) {
		t.Fatalf("Open = %v, want unsupported version 7 error naming %s", err, path)
	}
}

func TestEmptyLastSegmentRepaired(t *testing.T) {
	// A new segment whose header never reached the disk: short, or
	// preallocated and all zeros.
	for _, size := range []int{0, 10, 4096} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{Partitions: 8, SealDelay: -1, Dir: dir, SegmentBytes: 512, NoSync: true}
			want := buildLog(t, opts, 30, 8)
			last := want[len(want)-1]
			end := uint64(last.pos) + frameLen(last) + frameHeaderSize // + Close's seal
			path := filepath.Join(dir, segmentName(end))
			if err := os.WriteFile(path, make([]byte, size), 0o644); err != nil {
				t.Fatal(err)
			}
			l := openLog(t, opts)
			defer closeLog(t, l)
			if r := l.Recovery(); r.File != path {
				t.Fatalf("Recovery = %+v", r)
			}
			checkRecs(t, replayAll(t, l, 0), want)
			more := appendWait(t, l, []cmdlog.Entry{{Data: []byte("after")}})
			if uint64(more[0].pos) != end {
				t.Fatalf("append at %d, want %d", more[0].pos, end)
			}
			checkRecs(t, replayAll(t, l, 0), append(want, more...))
		})
	}
}

func TestBadSegmentHeader(t *testing.T) {
	for name, off := range map[string]int64{"magic": 2, "base": 14, "partitions": 21, "log id": 26, "counts": countsOffset + 2, "header checksum": segmentHeaderSize(8) - 2} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{Partitions: 8, SealDelay: -1, Dir: dir, SegmentBytes: 512, NoSync: true}
			buildLog(t, opts, 20, 12)
			path := segFiles(t, dir)[0]
			flipByte(t, path, off)
			_, err := Open(opts)
			var ce *CorruptionError
			if !errors.As(err, &ce) || ce.File != path || ce.Offset != 0 {
				t.Fatalf("Open = %v, want CorruptionError at %s:0", err, path)
			}
		})
	}
}

// Entries bigger than the read buffer make the readers grow it.
func TestLargeEntries(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Partitions: 8, SealDelay: -1, Dir: dir, SegmentBytes: 4 << 20, MaxBatchBytes: 1 << 20, NoSync: true}
	l := openLog(t, opts)
	rng := rand.New(rand.NewSource(13))
	var want []rec
	for _, size := range []int{100, 3 << 20, 10, 1<<20 + 5, 2 << 20, 7} {
		d := make([]byte, size)
		rng.Read(d)
		want = append(want, appendWait(t, l, []cmdlog.Entry{{Partition: 7, Data: d}})...)
	}
	checkRecs(t, replayAll(t, l, 0), want)
	closeLog(t, l)
	l = openLog(t, opts)
	defer closeLog(t, l)
	checkRecs(t, replayAll(t, l, 0), want)
	checkRecs(t, replayAll(t, l, want[3].pos), want[3:])
	if l.Epoch() != 1 {
		t.Fatalf("Epoch = %d", l.Epoch())
	}
}

func TestReleaseBefore(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Partitions: 8, SealDelay: -1, Dir: dir, SegmentBytes: 512, NoSync: true}
	rng := rand.New(rand.NewSource(9))
	l := openLog(t, opts)
	var want []rec
	for i := 0; i < 100; i++ {
		want = append(want, appendWait(t, l, randEntries(rng, 1, 60))...)
	}
	before := segFiles(t, dir)
	cut := want[50]
	if err := l.ReleaseBefore(cut.pos); err != nil {
		t.Fatal(err)
	}
	after := segFiles(t, dir)
	for _, f := range before {
		b := segBase(t, f)
		i := slices.Index(before, f)
		fully := i+1 < len(before) && segBase(t, before[i+1]) <= uint64(cut.pos)
		if kept := slices.Contains(after, f); kept == fully {
			t.Fatalf("segment %s (base %d): kept=%v, but fully before %d=%v", f, b, kept, cut.pos, fully)
		}
	}
	if len(after) == len(before) {
		t.Fatal("nothing released")
	}
	checkRecs(t, replayAll(t, l, cut.pos), want[50:])
	if err := l.Replay(0, func(cmdlog.Position, cmdlog.Entry) error { return nil }); err == nil {
		t.Fatal("Replay from a released position succeeded")
	}
	first := cmdlog.Position(segBase(t, after[0]))
	if start, _ := l.Start(); start != first {
		t.Fatalf("Start = %d, want %d", start, first)
	}
	var fromFirst []rec
	for _, r := range want {
		if r.pos >= first {
			fromFirst = append(fromFirst, r)
		}
	}
	checkRecs(t, replayAll(t, l, first), fromFirst)

	// Releasing everything keeps the active segment.
	if err := l.ReleaseBefore(l.End() + 1000); err != nil {
		t.Fatal(err)
	}
	if n := len(segFiles(t, dir)); n != 1 {
		t.Fatalf("%d segments left, want 1 (the active one)", n)
	}
	end := l.End() + frameHeaderSize // Close seals
	closeLog(t, l)

	l = openLog(t, opts)
	defer closeLog(t, l)
	if l.End() != end {
		t.Fatalf("End after reopen = %d, want %d", l.End(), end)
	}
	more := appendWait(t, l, randEntries(rng, 20, 60))
	checkRecs(t, replayAll(t, l, end), more)
}

func TestReplayDuringAppends(t *testing.T) {
	l := openLog(t, Options{Partitions: 8, SealDelay: -1, Dir: t.TempDir(), SegmentBytes: 1024, NoSync: true})
	defer closeLog(t, l)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewSource(10))
		for {
			select {
			case <-stop:
				return
			default:
			}
			appendWait(t, l, randEntries(rng, 2, 40))
		}
	}()
	from := cmdlog.Position(0)
	for i := 0; i < 30; i++ {
		end := l.End()
		got := replayAll(t, l, from)
		if len(got) > 0 {
			last := got[len(got)-1]
			if uint64(last.pos)+frameLen(last) < uint64(end) {
				t.Fatalf("replay stopped at %d, End was %d", uint64(last.pos)+frameLen(last), end)
			}
		}
		if i%10 == 9 {
			if err := l.ReleaseBefore(end / 2); err != nil {
				t.Fatal(err)
			}
			l.segMu.Lock()
			from = cmdlog.Position(l.segs[0].base)
			l.segMu.Unlock()
		}
	}
	close(stop)
	wg.Wait()
}

// TestRandomized appends random batches with random sizes and partitions,
// and at random points reopens the log, tears its tail, or releases a
// prefix, checking the whole log against a model after each step.
func TestRandomized(t *testing.T) {
	seeds := []int64{11, 12, 13, 14, 15, 16}
	for _, seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			dir := t.TempDir()
			opts := Options{Partitions: 8, SealDelay: -1, Dir: dir, SegmentBytes: int64(200 + rng.Intn(3000)), MaxBatchBytes: 100 + rng.Intn(5000), NoSync: true}
			l := openLog(t, opts)
			var model []rec
			start := cmdlog.Position(0)
			for step := 0; step < 60; step++ {
				// A burst of concurrent-ish appends so batches vary in size.
				n := 1 + rng.Intn(20)
				var mu sync.Mutex
				var wg sync.WaitGroup
				for i := 0; i < n; i++ {
					es := randEntries(rng, rng.Intn(4), []int{0, 10, 300, 2000}[rng.Intn(4)])
					wg.Add(1)
					l.Append(es, func(first, end cmdlog.Position, err error) {
						defer wg.Done()
						if err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						defer mu.Unlock()
						pos := first
						for _, e := range es {
							model = append(model, rec{pos, e.Partition, e.Data})
							pos += cmdlog.Position(frameHeaderSize + len(e.Data))
						}
					})
				}
				wg.Wait()

				switch rng.Intn(6) {
				case 0: // clean reopen
					closeLog(t, l)
					l = openLog(t, opts)
				case 1: // crash that tears the tail of the last segment
					closeLog(t, l)
					files := segFiles(t, dir)
					path := files[len(files)-1]
					st, _ := os.Stat(path)
					if st.Size() > segmentHeaderSize(8) {
						cut := st.Size() - 1 - rng.Int63n(st.Size()-segmentHeaderSize(8))
						if err := os.Truncate(path, cut); err != nil {
							t.Fatal(err)
						}
						limit := segBase(t, path) + uint64(cut-segmentHeaderSize(8))
						for len(model) > 0 && uint64(model[len(model)-1].pos)+frameLen(model[len(model)-1]) > limit {
							model = model[:len(model)-1]
						}
					}
					l = openLog(t, opts)
				case 2: // release a prefix
					if len(model) > 0 {
						if err := l.ReleaseBefore(model[rng.Intn(len(model))].pos); err != nil {
							t.Fatal(err)
						}
						l.segMu.Lock()
						start = cmdlog.Position(l.segs[0].base)
						l.segMu.Unlock()
						i := 0
						for i < len(model) && model[i].pos < start {
							i++
						}
						model = model[i:]
					}
				}

				checkRecs(t, replayAll(t, l, start), model)
				wantEnd := start
				if len(model) > 0 {
					last := model[len(model)-1]
					wantEnd = cmdlog.Position(uint64(last.pos) + frameLen(last))
				}
				// At most one seal (idle or Close) follows the last record.
				if e := l.End(); e != wantEnd && e != wantEnd+frameHeaderSize {
					t.Fatalf("End = %d, want %d (or one seal more)", e, wantEnd)
				}
				if len(model) > 0 {
					i := rng.Intn(len(model))
					checkRecs(t, replayAll(t, l, model[i].pos), model[i:])
				}
			}
			closeLog(t, l)
		})
	}
}

func BenchmarkAppend(b *testing.B) {
	var syncs, records atomic.Int64
	l, err := Open(Options{Partitions: 8, SealDelay: -1, Dir: b.TempDir(), OnSync: func(_ time.Duration, r, _ int) {
		syncs.Add(1)
		records.Add(int64(r))
	}})
	if err != nil {
		b.Fatal(err)
	}
	data := bytes.Repeat([]byte("d"), 48)
	b.SetParallelism(32) // 32 appenders per CPU, each waiting for its ack
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ack := make(chan error, 1)
		done := func(_, _ cmdlog.Position, err error) { ack <- err }
		entries := []cmdlog.Entry{{Partition: 1, Data: data}}
		for pb.Next() {
			l.Append(entries, done)
			if err := <-ack; err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	if s := syncs.Load(); s > 0 {
		b.ReportMetric(float64(records.Load())/float64(s), "records/fsync")
	}
	if err := l.Close(); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkReplay(b *testing.B) {
	const n = 1_000_000
	dir := b.TempDir()
	l, err := Open(Options{Partitions: 16, SealDelay: -1, Dir: dir, NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	data := bytes.Repeat([]byte("r"), 48)
	batch := make([]cmdlog.Entry, 1000)
	for i := range batch {
		batch[i] = cmdlog.Entry{Partition: uint32(i % 16), Data: data}
	}
	var wg sync.WaitGroup
	for i := 0; i < n/len(batch); i++ {
		wg.Add(1)
		l.Append(batch, func(_, _ cmdlog.Position, err error) {
			if err != nil {
				b.Error(err)
			}
			wg.Done()
		})
	}
	wg.Wait()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		count := 0
		if err := l.Replay(0, func(cmdlog.Position, cmdlog.Entry) error { count++; return nil }); err != nil {
			b.Fatal(err)
		}
		if count != n {
			b.Fatalf("replayed %d", count)
		}
	}
	b.StopTimer()
	l.Close()
}

func TestLeftoverTempSegmentRemoved(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Partitions: 8, SealDelay: -1, Dir: dir, NoSync: true}
	want := buildLog(t, opts, 5, 14)
	last := want[len(want)-1]
	tmp := filepath.Join(dir, segmentName(uint64(last.pos)+frameLen(last))+tmpExt)
	if err := os.WriteFile(tmp, []byte("SURGE"), 0o644); err != nil {
		t.Fatal(err)
	}
	l := openLog(t, opts)
	defer closeLog(t, l)
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temporary segment still there: %v", err)
	}
	checkRecs(t, replayAll(t, l, 0), want)
}

// TestIdleSeal: once the writer has been idle for SealDelay after a write,
// it seals it by itself (one empty frame), and only once.
func TestIdleSeal(t *testing.T) {
	l := openLog(t, Options{Partitions: 8, SealDelay: 5 * time.Millisecond, Dir: t.TempDir(), NoSync: true})
	defer closeLog(t, l)
	recs := appendWait(t, l, []cmdlog.Entry{{Partition: 1, Data: []byte("x")}})
	want := uint64(recs[0].pos) + frameLen(recs[0]) + frameHeaderSize
	deadline := time.Now().Add(5 * time.Second)
	for uint64(l.End()) != want {
		if time.Now().After(deadline) {
			t.Fatalf("End = %d, want %d (the record and one seal)", l.End(), want)
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(30 * time.Millisecond)
	if uint64(l.End()) != want {
		t.Fatalf("End = %d after more idle time, want %d: sealed more than once", l.End(), want)
	}
	checkRecs(t, replayAll(t, l, 0), recs)
}
