package kafkalog

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/surge-run/surge/internal/cmdlog"
)

type acked struct {
	first, end cmdlog.Position
	err        error
	datas      []string
}

// appendAll runs appends from several goroutines at once and returns what
// done reported, in the order done was called. An append that failed
// fails the test, naming Kafka's error: the tests that read the log back
// would otherwise report only what they missed.
func appendAll(t *testing.T, l *Log, goroutines, perG int, tag string) []acked {
	t.Helper()
	var (
		mu   sync.Mutex
		got  []acked
		wg   sync.WaitGroup
		pend sync.WaitGroup
	)
	for g := range goroutines {
		wg.Go(func() {
			for i := range perG {
				n := 1 + (g+i)%4
				entries := make([]cmdlog.Entry, n)
				datas := make([]string, n)
				for k := range n {
					datas[k] = fmt.Sprintf("%s-g%d-i%d-k%d", tag, g, i, k)
					entries[k] = cmdlog.Entry{Partition: uint32(l.partition), Data: []byte(datas[k])}
				}
				pend.Add(1)
				l.Append(entries, func(first, end cmdlog.Position, err error) {
					mu.Lock()
					got = append(got, acked{first, end, err, datas})
					mu.Unlock()
					pend.Done()
				})
			}
		})
	}
	wg.Wait()
	pend.Wait()
	for i, a := range got {
		if a.err != nil {
			t.Fatalf("append %d of %d: %v", i, len(got), a.err)
		}
	}
	return got
}

type replayed struct {
	pos  cmdlog.Position
	data string
}

func replayAll(t *testing.T, l *Log, from cmdlog.Position) []replayed {
	t.Helper()
	var out []replayed
	err := l.Replay(from, func(pos cmdlog.Position, e cmdlog.Entry) error {
		if e.Partition != uint32(l.partition) {
			t.Errorf("entry of partition %d replayed from partition %d", e.Partition, l.partition)
		}
		out = append(out, replayed{pos, string(e.Data)})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// expected flattens acknowledged appends into what a replay must give.
func expected(acks []acked) []replayed {
	var out []replayed
	for _, a := range acks {
		for _, d := range a.datas {
			out = append(out, replayed{a.first, d})
		}
	}
	return out
}

func sameReplay(t *testing.T, got, want []replayed) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("replay gave %d entries, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("replay entry %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestAppendReplayRoundTrip(t *testing.T) {
	cfg := testCluster(t, 2)
	reg := prometheus.NewRegistry()
	cfg.Metrics = NewMetrics(reg)
	const partition = 1
	l, err := Open(ctxT(t), cfg, partition)
	if err != nil {
		t.Fatal(err)
	}
	if s := l.Start(); s != 0 {
		t.Errorf("Start = %d on a new topic, want 0", s)
	}
	acks := appendAll(t, l, 8, 40, "a")
	var last cmdlog.Position
	for i, a := range acks {
		if a.first < last || a.end <= a.first {
			t.Fatalf("append %d: [%d, %d) after one ending at %d: done out of order", i, a.first, a.end, last)
		}
		last = a.end
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l.Append([]cmdlog.Entry{{Data: []byte("late")}}, func(_, _ cmdlog.Position, err error) {
		if !errors.Is(err, cmdlog.ErrClosed) {
			t.Errorf("append after Close: %v, want ErrClosed", err)
		}
	})

	// What one transaction carried: the writer should have grouped the
	// concurrent appends.
	var m dto.Metric
	if err := cfg.Metrics.TxnAppends.Write(&m); err != nil {
		t.Fatal(err)
	}
	h := m.GetHistogram()
	if h.GetSampleSum() != float64(len(acks)) {
		t.Errorf("txn appends sum %v, want %d", h.GetSampleSum(), len(acks))
	}
	t.Logf("%d appends in %d transactions (%.1f per transaction)", len(acks), h.GetSampleCount(), h.GetSampleSum()/float64(h.GetSampleCount()))

	// A new owner replays exactly what was acknowledged, in order.
	l2, err := Open(ctxT(t), cfg, partition)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	want := expected(acks)
	sameReplay(t, replayAll(t, l2, 0), want)

	// From the middle: from the first record of an append in the middle.
	mid := acks[len(acks)/2]
	var wantMid []replayed
	for _, r := range want {
		if r.pos >= mid.first {
			wantMid = append(wantMid, r)
		}
	}
	sameReplay(t, replayAll(t, l2, mid.first), wantMid)
	// From the end of the last append: nothing.
	sameReplay(t, replayAll(t, l2, acks[len(acks)-1].end), nil)

	// The other partition was never written.
	l0, err := Open(ctxT(t), cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer l0.Close()
	sameReplay(t, replayAll(t, l0, 0), nil)
}

func TestLargeAppendIsSplitAcrossRecords(t *testing.T) {
	cfg := testCluster(t, 1)
	l, err := Open(ctxT(t), cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	big := make([]cmdlog.Entry, 5)
	for i := range big {
		big[i].Data = make([]byte, 400<<10)
		big[i].Data[0] = byte(i)
	}
	errc := make(chan error, 1)
	var first, end cmdlog.Position
	l.Append(big, func(f, e cmdlog.Position, err error) { first, end = f, e; errc <- err })
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	l.Close()
	if end-first < 3 {
		t.Fatalf("2 MB append took offsets [%d, %d): want it split over records", first, end)
	}
	l2, err := Open(ctxT(t), cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	i := 0
	err = l2.Replay(0, func(pos cmdlog.Position, e cmdlog.Entry) error {
		if pos < first || pos >= end || len(e.Data) != 400<<10 || e.Data[0] != byte(i) {
			return fmt.Errorf("entry %d: pos %d, %d bytes", i, pos, len(e.Data))
		}
		i++
		return nil
	})
	if err != nil || i != len(big) {
		t.Fatalf("replayed %d entries: %v", i, err)
	}
}

func TestFencing(t *testing.T) {
	cfg := testCluster(t, 1)
	a, err := Open(ctxT(t), cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	acksA := appendAll(t, a, 2, 10, "a")

	// A's next transaction is held between produce and commit: its records
	// are in the partition but not committed when B takes over.
	paused, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	a.beforeCommit = func() {
		once.Do(func() { close(paused); <-resume })
	}
	inflight := make(chan error, 1)
	a.Append([]cmdlog.Entry{{Data: []byte("a-inflight")}}, func(_, _ cmdlog.Position, err error) { inflight <- err })
	<-paused

	cfgB := cfg
	cfgB.NodeID = "node-b"
	b, err := Open(ctxT(t), cfgB, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	sameReplay(t, replayAll(t, b, 0), expected(acksA))

	close(resume)
	if err := <-inflight; !errors.Is(err, cmdlog.ErrFenced) {
		t.Fatalf("A's in-flight append after B opened: %v, want ErrFenced", err)
	} else {
		t.Logf("A's in-flight append: %v", err)
	}
	late := make(chan error, 1)
	a.Append([]cmdlog.Entry{{Data: []byte("a-late")}}, func(_, _ cmdlog.Position, err error) { late <- err })
	if err := <-late; !errors.Is(err, cmdlog.ErrFenced) {
		t.Fatalf("A's append after B opened: %v, want ErrFenced", err)
	}

	acksB := appendAll(t, b, 1, 5, "b")

	// Everything readable: A's acknowledged appends, B's marker, B's
	// appends; nothing of A's after B's marker and no unacknowledged entry.
	lastB := acksB[len(acksB)-1].end - 1
	var nodes []string
	var datas []string
	err = readPartition(ctxT(t), cfg, cfg.LogTopic(), 0, 0, int64(lastB), true, func(r *kgo.Record) error {
		node := string(header(r, headerNode))
		if hasHeader(r, headerMarker) {
			node += "-marker"
			if r.Offset == b.marker && node != "node-b-marker" {
				t.Errorf("B's marker at %d written by %q", r.Offset, node)
			}
		} else if err := unpackEntries(r.Value, func(d []byte) error { datas = append(datas, string(d)); return nil }); err != nil {
			return err
		}
		if r.Offset > b.marker && node != "node-b" {
			t.Errorf("record at %d after B's marker at %d written by %s", r.Offset, b.marker, node)
		}
		nodes = append(nodes, node)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, r := range append(expected(acksA), expected(acksB)...) {
		want = append(want, r.data)
	}
	if fmt.Sprint(datas) != fmt.Sprint(want) {
		t.Fatalf("committed entries:\n%v\nwant\n%v", datas, want)
	}
	t.Logf("writers in offset order: %v", nodes)
}

// A fenced owner's transaction can only abort: check with a plain
// read_committed consumer that no record of it shows up even long after.
func TestFencedOwnerNeverCommitsLater(t *testing.T) {
	cfg := testCluster(t, 1)
	cfg.TxnTimeout = 2 * time.Second
	a, err := Open(ctxT(t), cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Open(ctxT(t), cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for i := range 3 {
		errc := make(chan error, 1)
		a.Append([]cmdlog.Entry{{Data: []byte("zombie")}}, func(_, _ cmdlog.Position, err error) { errc <- err })
		if err := <-errc; !errors.Is(err, cmdlog.ErrFenced) {
			t.Fatalf("zombie append %d: %v, want ErrFenced", i, err)
		}
	}
	got := replayAll(t, mustOpen(t, cfg, 0), 0)
	if len(got) != 0 {
		t.Fatalf("zombie entries readable: %v", got)
	}
}

func mustOpen(t *testing.T, cfg Config, p int) *Log {
	t.Helper()
	l, err := Open(ctxT(t), cfg, p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// Retention deleted the records a replay asks for: Start says where the log
// begins now, and a replay from before it fails instead of skipping them.
func TestReplayBeforeStartFails(t *testing.T) {
	cfg := testCluster(t, 1)
	a := mustOpen(t, cfg, 0)
	acks := appendAll(t, a, 1, 6, "a")
	cut := acks[3].first
	var os kadm.Offsets
	os.Add(kadm.Offset{Topic: cfg.LogTopic(), Partition: 0, At: int64(cut)})
	resp, err := testAdmin(t, cfg).DeleteRecords(ctxT(t), os)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	b := mustOpen(t, cfg, 0)
	if s := b.Start(); s != cut {
		t.Fatalf("Start = %d, want %d", s, cut)
	}
	if err := b.Replay(0, func(cmdlog.Position, cmdlog.Entry) error { return nil }); err == nil {
		t.Fatal("replay from before the log start succeeded")
	} else {
		t.Log(err)
	}
	sameReplay(t, replayAll(t, b, cut), expected(acks[3:]))
}

// TestAppendsRightAfterOpen: a log's first transactions follow its
// ownership marker's at once. franz-go could acknowledge the marker before
// its producer listed the new topic's partition; EndTransaction then
// aborted the marker while returning nil, and the first append failed
// with OUT_OF_ORDER_SEQUENCE_NUMBER (about one open in a few hundred on a
// loaded machine, so a few dozen opens only sometimes catch it). The
// first append also met CONCURRENT_TRANSACTIONS, which franz-go retried
// only after its next metadata refresh, up to 5 s later, past the tests'
// transaction timeout.
func TestAppendsRightAfterOpen(t *testing.T) {
	for range 25 {
		cfg := testCluster(t, 1)
		l := mustOpen(t, cfg, 0)
		acks := appendAll(t, l, 1, 3, "x")
		l.Close()
		// A replay covers what earlier owners left, so the next owner reads.
		next := mustOpen(t, cfg, 0)
		sameReplay(t, replayAll(t, next, 0), expected(acks))
		next.Close()
	}
}

// TestReadShortOfItsEndStops: a read waiting for an offset read_committed
// never shows ends with an error naming where it stood, instead of
// waiting for ever (a node's recovery would hang with nothing logged).
func TestReadShortOfItsEndStops(t *testing.T) {
	old := readStall
	readStall = 2 * time.Second
	t.Cleanup(func() { readStall = old })
	cfg := testCluster(t, 1)
	a := mustOpen(t, cfg, 0)
	acks := appendAll(t, a, 1, 3, "x")
	end := int64(acks[len(acks)-1].end)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	read := 0
	err := readPartition(ctx, cfg, cfg.LogTopic(), 0, 0, end+100, true, func(*kgo.Record) error { read++; return nil })
	if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "no record for") || !strings.Contains(err.Error(), fmt.Sprintf("short of %d", end+100)) ||
		!strings.Contains(err.Error(), fmt.Sprintf("high watermark %d, last stable offset %d", end+1, end+1)) {
		t.Fatalf("read past the end: %v (context %v), want the stall named", err, ctx.Err())
	}
	if read == 0 {
		t.Fatal("read nothing of what was there")
	}
	t.Log(err)
}

// openTxn begins a transaction of a producer of its own on the log's
// partition 0 and produces one record in it, which it returns with the
// producer: read_committed shows nothing from its offset on until the
// test ends the transaction.
func openTxn(t *testing.T, cfg Config) (*kgo.Client, *kgo.Record) {
	t.Helper()
	cl, err := cfg.NewClient(
		kgo.TransactionalID("surge-test."+cfg.Cluster),
		kgo.DefaultProduceTopic(cfg.LogTopic()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	rec := &kgo.Record{Partition: 0, Value: []byte("end"), Headers: []kgo.RecordHeader{{Key: headerMarker, Value: []byte("1")}}}
	if err := cl.ProduceSync(ctxT(t), rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return cl, rec
}

// appendsThenOpenTxn appends three entries to a fresh log's partition 0
// and opens a transaction after them (openTxn), for a read bounded by
// the context it returns.
func appendsThenOpenTxn(t *testing.T) (context.Context, Config, []acked, *kgo.Client, *kgo.Record) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	cfg := testCluster(t, 1)
	acks := appendAll(t, mustOpen(t, cfg, 0), 1, 3, "x")
	txn, end := openTxn(t, cfg)
	return ctx, cfg, acks, txn, end
}

// setReadTimes shortens the read's waits for a test.
func setReadTimes(t *testing.T, poll, restart, stall time.Duration) {
	oldPoll, oldRestart, oldStall := readPoll, readRestart, readStall
	readPoll, readRestart, readStall = poll, restart, stall
	t.Cleanup(func() { readPoll, readRestart, readStall = oldPoll, oldRestart, oldStall })
}

// TestReadRestartsAStuckConsumer: the read's end is committed after its
// consumer has caught up with everything before it (as when a replay
// starts before Kafka has written the commit marker of Open's marker
// transaction), and that consumer never shows it. The read starts a new
// consumer where it stands instead of waiting out readStall. The stuck
// consumer is made by pausing the partition: once, in CI, a replay's
// consumer showed nothing for readStall while the last stable offset
// stood past the record it waited for.
func TestReadRestartsAStuckConsumer(t *testing.T) {
	setReadTimes(t, 200*time.Millisecond, time.Second, time.Minute)
	ctx, cfg, acks, txn, end := appendsThenOpenTxn(t)

	var (
		mu      sync.Mutex
		clients []*kgo.Client
	)
	testReadClient = func(cl *kgo.Client) {
		mu.Lock()
		clients = append(clients, cl)
		mu.Unlock()
	}
	t.Cleanup(func() { testReadClient = nil })
	lastAcked := int64(acks[len(acks)-1].end) - 1
	paused := make(chan struct{})
	var got []int64
	read := make(chan error, 1)
	go func() {
		read <- readPartition(ctx, cfg, cfg.LogTopic(), 0, 0, end.Offset, true, func(r *kgo.Record) error {
			got = append(got, r.Offset)
			if r.Offset == lastAcked {
				mu.Lock()
				clients[0].PauseFetchPartitions(map[string][]int32{cfg.LogTopic(): {0}})
				mu.Unlock()
				close(paused)
			}
			return nil
		})
	}()
	select {
	case <-paused:
	case err := <-read:
		t.Fatalf("read ended before reaching offset %d: %v", lastAcked, err)
	}
	if err := txn.EndTransaction(ctxT(t), kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	if err := <-read; err != nil {
		t.Fatal(err)
	}
	if len(got) == 0 || got[len(got)-1] != end.Offset {
		t.Fatalf("read records %v, want them to end at %d", got, end.Offset)
	}
	for i := 1; i < len(got); i++ {
		if got[i] <= got[i-1] {
			t.Fatalf("read records %v: out of order or twice", got)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(clients) < 2 {
		t.Fatalf("%d consumers, want the stuck one replaced", len(clients))
	}
}

// TestReadEndsPastAnAbortedEnd: a read whose end read_committed never
// shows (its transaction aborted) ends at the abort marker past it, with
// every committed record before it read, instead of stalling.
func TestReadEndsPastAnAbortedEnd(t *testing.T) {
	setReadTimes(t, readPoll, readRestart, 30*time.Second)
	ctx, cfg, acks, txn, end := appendsThenOpenTxn(t)
	if err := txn.EndTransaction(ctxT(t), kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	var datas []string
	err := readPartition(ctx, cfg, cfg.LogTopic(), 0, 0, end.Offset, true, func(r *kgo.Record) error {
		if r.Offset == end.Offset {
			t.Errorf("aborted record at %d read", r.Offset)
		}
		if hasHeader(r, headerMarker) {
			return nil
		}
		return unpackEntries(r.Value, func(d []byte) error { datas = append(datas, string(d)); return nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, r := range expected(acks) {
		want = append(want, r.data)
	}
	if fmt.Sprint(datas) != fmt.Sprint(want) {
		t.Fatalf("read %v, want %v", datas, want)
	}
}

// A caller that appends one record at a time, each after the last is
// committed, does not sit out MinCycle: with nothing else coming, the next
// transaction starts once its record is there (internal/groupcommit).
func TestSequentialAppendsDoNotWaitOutTheCycle(t *testing.T) {
	cfg := testCluster(t, 1)
	cfg.MinCycle = time.Hour
	l := mustOpen(t, cfg, 0)
	done := make(chan error, 1)
	go func() {
		for i := range 20 {
			errc := make(chan error, 1)
			l.Append([]cmdlog.Entry{{Data: fmt.Appendf(nil, "seq-%02d", i)}}, func(_, _ cmdlog.Position, err error) { errc <- err })
			if err := <-errc; err != nil {
				done <- fmt.Errorf("append %d: %w", i, err)
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("20 sequential appends still waiting after a minute, with MinCycle at an hour")
	}
}
