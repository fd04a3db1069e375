package engine_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/surge-run/surge/internal/cmdlog"
	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/promtest"
	"github.com/surge-run/surge/internal/wal"
)

// The snapshot triggers other than the command count. Each test turns the
// count trigger out of reach, so a snapshot can only come from the trigger
// under test.

const neverByCount = 1 << 30

// latestSnapshot reads partition p's newest snapshot in a test data dir
// (not with OpenSnapshotDir, which removes the temporary file of a
// snapshot being written).
func latestSnapshot(t testing.TB, dir string, p int) (data []byte, ok bool) {
	t.Helper()
	sd := wal.SnapshotDir{Dir: filepath.Join(dir, "snap")}
	_, data, ok, err := sd.Latest(uint32(p))
	if err != nil {
		t.Fatal(err)
	}
	return data, ok
}

// waitSnapshot polls for a snapshot of partition p (the snapshotter writes
// it after the batch that carried it is durable).
func waitSnapshot(t testing.TB, dir string, p int) []byte {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if data, ok := latestSnapshot(t, dir, p); ok {
			return data
		}
		if time.Now().After(deadline) {
			t.Fatalf("no snapshot of partition %d after 30 s", p)
		}
	}
}

// byBytesTransfers is how many transfers the byte trigger's child makes:
// each is a client record and a credit message of ~30 bytes, far over the
// 4 KiB the trigger is set to.
const byBytesTransfers = 400

// TestSnapshotTriggeredByLogBytes: a partition that has logged
// SnapshotBytes since its last snapshot takes one, though the command
// count is far from due, and a restart after kill -9 replays only what
// came after it. The child makes the transfers, waits for the snapshot,
// and SIGKILLs itself.
//
// Before the byte trigger, the only triggers were the command count and
// shutdown: the child saw no snapshot, and restart replayed every record.
func TestSnapshotTriggeredByLogBytes(t *testing.T) {
	if dir := os.Getenv("SURGE_SNAPBYTES_CHILD"); dir != "" {
		snapBytesChild(dir)
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestSnapshotTriggeredByLogBytes$")
	cmd.Env = append(os.Environ(), "SURGE_SNAPBYTES_CHILD="+dir)
	out, _ := cmd.Output()
	if st, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !st.Signaled() {
		t.Fatalf("child was not killed: %v\n%s", cmd.ProcessState, out)
	}
	if !strings.Contains(string(out), "SNAPSHOT") {
		t.Fatalf("the child saw no snapshot after %d transfers (%d bytes of log, the trigger at 4096):\n%s", byBytesTransfers, 2*byBytesTransfers*30, out)
	}
	var logs lockedBuffer
	e := openEngineWith(t, dir, func(o *engine.Options) {
		o.SnapshotEvery = neverByCount
		o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	defer e.Close()
	m := regexp.MustCompile(`msg=recovered .*replayed_records=(\d+)`).FindStringSubmatch(logs.String())
	if m == nil {
		t.Fatalf("no recovery line in the log:\n%s", logs.String())
	}
	replayed, _ := strconv.Atoi(m[1])
	// Every transfer logged two records; the snapshot covers all but
	// what came after the last trigger.
	if replayed >= 2*byBytesTransfers {
		t.Fatalf("restart replayed %d records, all of the %d logged: the snapshot covered none", replayed, 2*byBytesTransfers)
	}
	if _, _, n := settle(t, e); n != byBytesTransfers {
		t.Fatalf("after restart: %d transfers, want %d", n, byBytesTransfers)
	}
	t.Logf("replayed %d of %d records", replayed, 2*byBytesTransfers)
}

func snapBytesChild(dir string) {
	t := &testing.T{}
	e := openEngineWith(t, dir, func(o *engine.Options) {
		o.SnapshotEvery = neverByCount
		o.SnapshotBytes = 4096
		o.SnapshotInterval = -1
	})
	p := e.PartitionOf("a")
	var wg sync.WaitGroup
	var failed atomic.Bool
	for range 8 {
		wg.Go(func() {
			for range byBytesTransfers / 8 {
				if _, err := e.Do(context.Background(), p, 7, &transfer{From: "a", To: "a", N: 1}); err != nil {
					failed.Store(true)
				}
			}
		})
	}
	wg.Wait()
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	if failed.Load() {
		fmt.Fprintln(out, "a transfer failed")
		return
	}
	settle(t, e) // every credit is durable: nothing is lost to the kill
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if _, ok := latestSnapshot(t, dir, p); ok {
			fmt.Fprintln(out, "SNAPSHOT")
			out.Flush()
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
	}
	fmt.Fprintln(out, "no snapshot")
	out.Flush()
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
}

// TestSnapshotBytesSpentOverAllPartitions: the byte trigger spends
// SnapshotBytes over all partitions. One busy partition snapshots when
// the log reaches the whole of it, not at its share (before, the only
// busy partition of four wrote its state every quarter of the bound).
// One that went quiet holding most of the total keeps it while another
// logs, which snapshots at its share of the total, and the total stays
// within SnapshotBytes × Partitions / (Partitions − 1).
func TestSnapshotBytesSpentOverAllPartitions(t *testing.T) {
	const budget = 16 << 10
	dir := t.TempDir()
	reg := prometheus.NewRegistry()
	e := openEngineWith(t, dir, func(o *engine.Options) {
		o.SnapshotEvery = neverByCount
		o.SnapshotBytes = budget
		o.SnapshotInterval = -1
		o.Metrics = engine.NewMetrics(reg)
	})
	defer e.Close()
	busy, other := e.PartitionOf("a"), -1
	for p := range e.Partitions() {
		if p != busy {
			other = p
			break
		}
	}
	a, b := "a", keyOn(e, other, "b")
	for logged := int64(0); logged < budget*3/4; {
		before := engine.UnsnappedBytes(e)
		mustDo(t, e, busy, &transfer{From: a, To: a, N: 1})
		after := engine.UnsnappedBytes(e)
		if after < before {
			t.Fatalf("partition %d snapshotted with %d bytes of log over all partitions, under the %d they share", busy, before, budget)
		}
		logged += after - before
	}
	settle(t, e)
	if _, ok := latestSnapshot(t, dir, busy); ok {
		t.Fatalf("partition %d snapshotted with %d bytes of log over all partitions, under the %d they share", busy, engine.UnsnappedBytes(e), budget)
	}

	// The busy one goes quiet; the other logs until it snapshots.
	limit := int64(budget*4/3 + 1024) // the bound, and a batch's slack
	for i := 0; ; i++ {
		mustDo(t, e, other, &transfer{From: b, To: b, N: 1})
		if u := engine.UnsnappedBytes(e); u > limit {
			t.Fatalf("%d bytes of log since the snapshots, over %d", u, limit)
		}
		if _, ok := latestSnapshot(t, dir, other); ok {
			break
		}
		if i > 2000 {
			t.Fatalf("partition %d never snapshotted; %d bytes of log since the snapshots", other, engine.UnsnappedBytes(e))
		}
	}
	if _, ok := latestSnapshot(t, dir, busy); ok {
		t.Fatal("the quiet partition snapshotted without a batch")
	}

	// The busy one again: it holds most of the total, so its next
	// batches past the budget carry its snapshot.
	for i := 0; ; i++ {
		mustDo(t, e, busy, &transfer{From: a, To: a, N: 1})
		if _, ok := latestSnapshot(t, dir, busy); ok {
			break
		}
		if i > 2000 {
			t.Fatalf("partition %d never snapshotted; %d bytes of log since the snapshots", busy, engine.UnsnappedBytes(e))
		}
	}
	settle(t, e) // every credit applied: nothing logs between the two reads below
	u := engine.UnsnappedBytes(e)
	if u >= budget {
		t.Fatalf("%d bytes of log since the snapshots after both took one, want under %d", u, budget)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var gauge *float64
	for _, mf := range mfs {
		if mf.GetName() == "surge_engine_log_unsnapshotted_bytes" {
			gauge = new(mf.GetMetric()[0].GetGauge().GetValue())
		}
	}
	if gauge == nil || *gauge != float64(u) {
		t.Fatalf("surge_engine_log_unsnapshotted_bytes %v, want %d", gauge, u)
	}
}

// TestSnapshotCountWaitsForALargeState: a partition whose last snapshot
// is more than twice the log it has written since does not snapshot at
// the command count; it waits for that log, then does. Before, the count
// trigger ignored the state's size: one busy jobs partition wrote its
// whole retained state every 100,000 commands, 28.6 MB for 12.5 MB of log
// and more as finished jobs piled up.
func TestSnapshotCountWaitsForALargeState(t *testing.T) {
	dir := t.TempDir()
	var p int
	var big string
	{ // A state of many long-named accounts, written by the close.
		e := openEngineWith(t, dir, func(o *engine.Options) {
			o.SnapshotEvery = neverByCount
			o.SnapshotBytes = -1
			o.SnapshotInterval = -1
		})
		p = e.PartitionOf("a")
		name := strings.Repeat("x", 200)
		for i := range 300 {
			k := keyOn(e, p, fmt.Sprintf("%s-%d-", name, i))
			mustDo(t, e, p, &transfer{From: k, To: k, N: 1})
		}
		big = keyOn(e, p, "a")
		settle(t, e)
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	}
	pos0, state, ok, err := wal.SnapshotDir{Dir: filepath.Join(dir, "snap")}.Latest(uint32(p))
	if err != nil || !ok {
		t.Fatalf("no snapshot of partition %d after close: %v", p, err)
	}

	const every = 10
	e := openEngineWith(t, dir, func(o *engine.Options) {
		o.SnapshotEvery = every
		o.SnapshotBytes = -1
		o.SnapshotInterval = -1
	})
	defer e.Close()
	var logged int64 // roughly: it misses the batch that carried the snapshot
	for i := 0; ; i++ {
		before := engine.UnsnappedBytes(e)
		mustDo(t, e, p, &transfer{From: big, To: big, N: 1})
		if after := engine.UnsnappedBytes(e); after > before {
			logged += after - before
		}
		pos, _, _, err := wal.SnapshotDir{Dir: filepath.Join(dir, "snap")}.Latest(uint32(p))
		if err != nil {
			t.Fatal(err)
		}
		if pos != pos0 {
			// Only p logged since the first snapshot: the log between the
			// two is its (with the frames' headers).
			if n := int64(pos - pos0); n < int64(len(state))/2 {
				t.Fatalf("partition %d snapshotted its %d-byte state after %d transfers and %d bytes of log, under half the state", p, len(state), i+1, n)
			}
			t.Logf("snapshot after %d transfers (the count is %d), %d bytes of log, state %d bytes", i+1, every, pos-pos0, len(state))
			return
		}
		if logged > 2*int64(len(state)) {
			t.Fatalf("no snapshot of partition %d after %d transfers and %d bytes of log, twice its %d-byte state", p, i+1, logged, len(state))
		}
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// fakeClock is the engine's clock in the time trigger's tests: it moves
// only when the test says.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) now() int64              { return c.ns.Load() }
func (c *fakeClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// openTimeTriggered opens the bank on dir with only the time trigger, at
// an hour, on the clock c.
func openTimeTriggered(t *testing.T, dir string, c *fakeClock, reg *prometheus.Registry) *engine.Engine {
	return openEngineWith(t, dir, func(o *engine.Options) {
		o.SnapshotEvery = neverByCount
		o.SnapshotBytes = -1
		o.SnapshotInterval = time.Hour
		o.Metrics = engine.NewMetrics(reg)
		engine.SetClock(o, c.now)
	})
}

// TestSnapshotTriggeredByTimeOnABatch: a partition busy (but below the
// count and byte limits) takes a snapshot once SnapshotInterval has passed
// since its last one, carried by its next batch. Before the time trigger
// none was taken.
func TestSnapshotTriggeredByTimeOnABatch(t *testing.T) {
	dir := t.TempDir()
	c := &fakeClock{}
	c.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	e := openTimeTriggered(t, dir, c, prometheus.NewRegistry())
	defer e.Close()
	p := e.PartitionOf("a")
	for range 5 {
		mustDo(t, e, p, &transfer{From: "a", To: "a", N: 1})
	}
	settle(t, e)
	if _, ok := latestSnapshot(t, dir, p); ok {
		t.Fatal("a snapshot before the interval passed")
	}
	c.advance(time.Hour)
	mustDo(t, e, p, &transfer{From: "a", To: "a", N: 1})
	data := waitSnapshot(t, dir, p)
	// 5 transfers of two records each, and the sixth's client record.
	if got := engine.SnapshotRecords(data); got < 11 {
		t.Fatalf("the snapshot covers %d records, want at least 11", got)
	}
}

// TestSnapshotTriggeredByTimeWhenIdle: a partition that logged records and
// then went quiet is snapshotted once SnapshotInterval has passed, with no
// batch to carry it, so its records stop pinning the log; after that,
// unchanged, it is not snapshotted again however long it stays idle.
func TestSnapshotTriggeredByTimeWhenIdle(t *testing.T) {
	dir := t.TempDir()
	c := &fakeClock{}
	c.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	reg := prometheus.NewRegistry()
	e := openTimeTriggered(t, dir, c, reg)
	p := e.PartitionOf("a")
	for range 5 {
		mustDo(t, e, p, &transfer{From: "a", To: "a", N: 1})
	}
	settle(t, e)
	c.advance(time.Hour)
	// A query logs nothing; it only wakes the processor, which finds the
	// interval passed on the clock it was told about.
	totals(t, e)
	data := waitSnapshot(t, dir, p)
	if got := engine.SnapshotRecords(data); got != 10 {
		t.Fatalf("the idle snapshot covers %d records, want all 10", got)
	}
	for range 3 {
		c.advance(2 * time.Hour)
		totals(t, e)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if n := counterValue(t, reg, "surge_engine_snapshots_total"); n != 1 {
		t.Fatalf("%v snapshots written, want 1: an unchanged idle partition was snapshotted again", n)
	}
}

// deliveredTransfers is how many cross-partition transfers the delivered
// messages test's child makes before it is killed.
const deliveredTransfers = 300

// TestRestartDoesNotResendDeliveredMessages: acknowledgements are never
// logged, so replay rebuilds the outbox of every message sent since the
// sender's snapshot. Those whose receiver's replayed state holds them
// (its high-water mark is at or past them) must not be sent again. The
// child makes transfers between partitions, waits until every credit is
// applied and durable, and SIGKILLs itself; every message was delivered.
//
// Before: recovery re-sent all of them (300 here, 606,690 after 807,303
// commerce records), and receivers only dropped and acknowledged them.
func TestRestartDoesNotResendDeliveredMessages(t *testing.T) {
	if dir := os.Getenv("SURGE_DELIVERED_CHILD"); dir != "" {
		deliveredChild(dir)
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestRestartDoesNotResendDeliveredMessages$")
	cmd.Env = append(os.Environ(), "SURGE_DELIVERED_CHILD="+dir)
	out, _ := cmd.Output()
	if !strings.Contains(string(out), "SETTLED") {
		t.Fatalf("the child did not settle:\n%s", out)
	}
	sd, err := wal.OpenSnapshotDir(nil, filepath.Join(dir, "snap"))
	if err != nil {
		t.Fatal(err)
	}
	o := engine.Options{Partitions: 4, Snapshots: sd, Logger: quiet, SnapshotEvery: neverByCount, Log: openWAL(t, dir, 4)}
	n, err := engine.RecoveredOutboxes(o, bank{})
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("recovery would re-send %d messages; every one of the %d was applied by its receiver before the kill", n, deliveredTransfers)
	}
	e := openEngine(t, dir, neverByCount)
	defer e.Close()
	if d, c, n := settle(t, e); d != c || n != deliveredTransfers {
		t.Fatalf("after restart: debits %d credits %d transfers %d", d, c, n)
	}
}

func deliveredChild(dir string) {
	t := &testing.T{}
	e := openEngine(t, dir, neverByCount)
	for i := range deliveredTransfers {
		from, to := keys[i%len(keys)], keys[(i+3)%len(keys)]
		if _, err := e.Do(context.Background(), e.PartitionOf(from), 7, &transfer{From: from, To: to, N: 1}); err != nil {
			fmt.Println("transfer failed:", err)
			return
		}
	}
	if d, c, _ := settle(t, e); d != c {
		fmt.Println("credits missing")
		return
	}
	fmt.Println("SETTLED")
	os.Stdout.Sync()
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
}

// gatedSnapshots holds every snapshot write until open is closed, and
// counts the writes begun.
type gatedSnapshots struct {
	engine.SnapshotStore
	open   chan struct{}
	begun  atomic.Int64
	failed atomic.Bool // fail the first write, once the gate opens
}

func (g *gatedSnapshots) Write(part uint32, pos cmdlog.Position, data []byte) error {
	g.begun.Add(1)
	<-g.open
	if g.failed.CompareAndSwap(false, true) {
		return errors.New("a full disk")
	}
	return g.SnapshotStore.Write(part, pos, data)
}

// A partition captures its next snapshot only once its last is written:
// each capture holds the state it saw (payloads, retained jobs), so
// captures queued behind a slow writer each pinned a whole state. A
// storm of 1 MiB jobs queued 22 of them and took the process to 14 GB.
// The count trigger here fires every 2 commands while the writer is
// stuck on the first snapshot; then the first write fails, and the
// partition must go on snapshotting after it.
func TestSnapshotWaitsForItsPartitionsLast(t *testing.T) {
	dir := t.TempDir()
	sd, err := wal.OpenSnapshotDir(nil, filepath.Join(dir, "snap"))
	if err != nil {
		t.Fatal(err)
	}
	g := &gatedSnapshots{SnapshotStore: sd, open: make(chan struct{})}
	reg := prometheus.NewRegistry()
	e := openEngineWith(t, dir, func(o *engine.Options) {
		o.Snapshots = g
		o.SnapshotEvery = 2
		o.SnapshotBytes = -1
		o.SnapshotInterval = -1
		o.Metrics = engine.NewMetrics(reg)
	})
	defer e.Close()
	var opened sync.Once
	openGate := func() { opened.Do(func() { close(g.open) }) }
	defer openGate() // before the close, which waits for the writer
	p := e.PartitionOf("a")
	k := keyOn(e, p, "a")
	forks := func() uint64 {
		t.Helper()
		m := promtest.Series(t, reg, "surge_engine_snapshot_fork_seconds", nil)
		if m == nil {
			t.Fatal("no snapshot fork histogram")
		}
		return m.GetHistogram().GetSampleCount()
	}
	for range 40 {
		mustDo(t, e, p, &transfer{From: k, To: k, N: 1})
	}
	if n := forks(); n != 1 {
		t.Fatalf("%d snapshots captured while the first waits to be written; want 1", n)
	}
	openGate() // the first write fails; the partition must try again
	deadline := time.Now().Add(10 * time.Second)
	for {
		mustDo(t, e, p, &transfer{From: k, To: k, N: 1})
		if _, ok := latestSnapshot(t, dir, p); ok && forks() >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no snapshot of partition %d written after the failed one (%d captured, %d writes begun)", p, forks(), g.begun.Load())
		}
	}
}
