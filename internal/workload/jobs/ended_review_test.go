package jobs

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/surge-run/surge/internal/ids"
)

// TestEndedRecordsUnderChurn runs one partition through every way a job
// ends, comes back and goes (reports, cancels, retries, purges, the
// MaxFinished cap, forced queue deletes), with payloads large enough
// that ended records fill, retire and compact chunks within a few
// commands. After each step the partition's books must agree with its
// jobs (checkEndedBooks); forks taken along the way must encode the
// state they were taken from however the partition moved on; and every
// so often the log replays and the snapshot restores to the same bytes.
func TestEndedRecordsUnderChurn(t *testing.T) {
	seeds := 6
	if testing.Short() {
		seeds = 2
	}
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { endedChurn(t, seed) })
	}
}

func endedChurn(t *testing.T, seed uint64) {
	h := newHarness(t, seed+100, 1, Limits{MaxJobsPerQueue: 200, MaxFinished: []int{40, 2, 400}[seed%3]})
	rnd := rand.New(rand.NewPCG(seed, 11))
	queues := []string{DefaultQueue, "b"}
	h.Client("", &CreateQueue{Name: "b"})
	var idsSeen []string
	n := 0
	newID := func() string {
		n++
		if rnd.IntN(5) == 0 {
			return fmt.Sprintf("job-%d", n)
		}
		return ids.FromUint64s(seed, uint64(n)).String()
	}
	submit := func(q string) Submit {
		s := Submit{JobID: newID(), Queue: q, Payload: bytes.Repeat([]byte{byte(n)}, 1000+rnd.IntN(40_000)),
			MaxRetries: int32(1 + rnd.IntN(2)), RetentionNs: int64(1+rnd.IntN(20)) * 1e9}
		if rnd.IntN(3) == 0 {
			s.IdempotencyKey = fmt.Sprintf("k%d", rnd.IntN(40))
		}
		return s
	}
	var forks heldForks
	m := func() *Machine { return h.Machines[0] }
	for step := range 700 {
		q := queues[rnd.IntN(len(queues))]
		switch op := rnd.IntN(100); {
		case op < 25:
			s := submit(q)
			h.Client("", &s)
			idsSeen = append(idsSeen, s.JobID)
		case op < 30:
			b := SubmitBatch{}
			for range 1 + rnd.IntN(4) {
				b.Jobs = append(b.Jobs, submit(q))
			}
			if r := h.Client("", &b); r.Outcome == Created {
				for _, s := range b.Jobs {
					idsSeen = append(idsSeen, s.JobID)
				}
			}
		case op < 50:
			r := h.Client("", &Lease{Queue: q, Worker: "w", Max: int32(1 + rnd.IntN(5)), LeaseNs: 30e9})
			for _, j := range r.Jobs {
				h.Client("", &Report{JobID: j.ID, Worker: "w", Success: rnd.IntN(3) > 0, Result: make([]byte, rnd.IntN(3000))})
			}
		case op < 60 && len(idsSeen) > 0:
			h.Client("", &Cancel{JobID: idsSeen[rnd.IntN(len(idsSeen))]})
		case op < 75 && len(idsSeen) > 0:
			h.Client("", &Retry{JobID: idsSeen[rnd.IntN(len(idsSeen))]})
		case op < 77 && q != DefaultQueue:
			h.Client("", &DeleteQueue{Name: q, Force: true})
			h.Client("", &CreateQueue{Name: q})
		case op < 90:
			h.Advance(int64(rnd.IntN(4)) * 1e9)
		case op < 95:
			forks.take(m(), step)
		default:
			forks.check(t, fmt.Sprint("step ", step))
			h.CheckReplay()
		}
		checkEndedBooks(t, step, m())
	}
	forks.check(t, "at the end")
	h.CheckReplay()
}

// checkEndedBooks checks that a partition's counts, order, index,
// idempotency keys and chunks agree with its jobs.
func checkEndedBooks(t *testing.T, step int, m *Machine) {
	t.Helper()
	all := m.allJobs()
	finished, held := 0, 0
	live := map[uint32]int{}
	for name, q := range m.queues {
		var counts [numStatuses]int64
		jobs := 0
		for _, r := range q.order {
			if r.seq == 0 {
				continue
			}
			jobs++
			j := r.j
			if j == nil && r.status == Pending {
				j = all[recordHeadID(m.pend.rec(r.rec))] // checked by allJobs
			} else if j == nil {
				e, ok := m.ended.get(keyOf(recordID(m, r)))
				if !ok || e.loc != r.rec || e.status != r.status || e.seq != r.seq {
					t.Fatalf("step %d: queue %s's ref %+v, index %+v", step, name, r, e)
				}
				live[r.rec.chunk] += int(r.rec.n)
				_, j = m.ended.decode(r.rec)
				if j.Status != r.status || j.CreatedAt != r.created || j.StartedAt != r.started || !j.Status.Finished() {
					t.Fatalf("step %d: ref %+v of job %+v", step, r, j)
				}
			} else if j.Status.Finished() {
				t.Fatalf("step %d: finished job %s still a *Job after its command", step, j.ID)
			}
			if j.Queue != name || j.Seq != r.seq {
				t.Fatalf("step %d: job %s (queue %s, seq %d) in queue %s at seq %d", step, j.ID, j.Queue, j.Seq, name, r.seq)
			}
			counts[j.Status]++
			if j.IdemKey != "" && q.keys[j.IdemKey] != j.ID {
				t.Fatalf("step %d: key %q of %s maps to %q", step, j.IdemKey, j.ID, q.keys[j.IdemKey])
			}
		}
		if counts != q.counts || jobs != q.jobs {
			t.Fatalf("step %d: queue %s counts %v (%d jobs), books %v (%d)", step, name, counts, jobs, q.counts, q.jobs)
		}
		for k, id := range q.keys {
			if j := all[id]; j == nil || j.IdemKey != k || j.Queue != name {
				t.Fatalf("step %d: key %q of queue %s maps to %q: %+v", step, k, name, id, j)
			}
		}
		finished += int(q.counts[Done] + q.counts[DeadLettered])
		held += jobs
	}
	if finished != m.finished || held != len(all) {
		t.Fatalf("step %d: %d finished, books %d; %d held, %d jobs", step, finished, m.finished, held, len(all))
	}
	for i, c := range m.ended.chunks {
		if c == nil {
			if live[uint32(i)] != 0 {
				t.Fatalf("step %d: refs into freed chunk %d", step, i)
			}
			continue
		}
		if c.live != live[uint32(i)] {
			t.Fatalf("step %d: chunk %d counts %d live bytes, refs %d", step, i, c.live, live[uint32(i)])
		}
	}
	checkEndedMemory(t, step, &m.ended)
}

func recordID(m *Machine, r jobRef) string { return recordHeadID(m.ended.rec(r.rec)) }

func recordHeadID(rec []byte) string {
	_, _, id := recordHead(rec)
	return id
}

// TestEndedChunksFollowKeptBytesAfterLargeRecords: a record too large
// for the rest of the current chunk retires it however little it holds.
// Small ended jobs, each followed by a large one that then left (retried
// here, purged alike), kept one 256 KiB chunk per small job: none was
// ever compacted, as its few records filled all of its written length.
// Memory must follow what is kept, measured by what chunks hold (their
// capacity), not by what was written into them.
func TestEndedChunksFollowKeptBytesAfterLargeRecords(t *testing.T) {
	const pairs = 40
	h := newHarness(t, 9, 1, Limits{})
	m := h.Machines[0]
	for i := range pairs {
		for _, c := range []Submit{
			{JobID: fmt.Sprintf("small-%d", i), Queue: DefaultQueue, Payload: make([]byte, 9000)},
			{JobID: fmt.Sprintf("large-%d", i), Queue: DefaultQueue, Payload: make([]byte, 300_000)},
		} {
			if r := h.Client("", &c); r.Outcome != Created {
				t.Fatal(r.Msg)
			}
			if r := h.Client("", &Cancel{JobID: c.JobID}); r.Outcome != OK {
				t.Fatal(r.Msg)
			}
		}
	}
	for i := range pairs { // the large jobs leave (retried; purged alike)
		if r := h.Client("", &Retry{JobID: fmt.Sprintf("large-%d", i)}); r.Outcome != OK {
			t.Fatal(r.Msg)
		}
	}
	if n := m.ended.len(); n != pairs {
		t.Fatalf("%d ended jobs kept, want %d", n, pairs)
	}
	held, live := 0, 0
	for _, c := range m.ended.chunks {
		if c != nil {
			held += cap(c.b)
			live += c.live
		}
	}
	if held > 4*live+2*endedChunkBytes {
		t.Fatalf("chunks hold %d bytes for %d live bytes", held, live)
	}
	checkEndedBooks(t, 0, m)
	h.CheckReplay()
}

// TestForkEncodesWhileEndedRecordsMove: a fork is encoded on another
// goroutine while the partition goes on ending jobs (records appended to
// the chunk the fork shares), retrying them and compacting. The fork
// must encode the state it was taken from, and, under -race, read no
// byte the partition writes.
func TestForkEncodesWhileEndedRecordsMove(t *testing.T) {
	h := newHarness(t, 4, 1, Limits{})
	id := func(i int) string { return ids.FromUint64s(uint64(i), 4).String() }
	end := func(i int) {
		if r := h.Client("", &Submit{JobID: id(i), Queue: DefaultQueue, Payload: make([]byte, 2000+i%3000)}); r.Outcome != Created {
			t.Fatal(r.Msg)
		}
		if r := h.Client("", &Cancel{JobID: id(i)}); r.Outcome != OK {
			t.Fatal(r.Msg)
		}
	}
	for i := range 300 {
		end(i)
	}
	fork := h.Machines[0].ForkSnapshot()
	want := h.Machines[0].AppendSnapshot(nil)
	stop, differs := make(chan struct{}), make(chan bool)
	go func() { // encodes again and again while the partition moves on
		for {
			if !bytes.Equal(fork(nil), want) {
				differs <- true
				return
			}
			select {
			case <-stop:
				differs <- false
				return
			default:
			}
		}
	}()
	for i := 300; i < 600; i++ {
		end(i)
		if r := h.Client("", &Retry{JobID: id(i - 300)}); r.Outcome != OK {
			t.Fatal(r.Msg)
		}
	}
	close(stop)
	if <-differs {
		t.Fatal("the fork encodes another state than the one it was taken from")
	}
	checkEndedBooks(t, 0, h.Machines[0])
}

// TestDroppingEndedJobsDecodesNoPayload: purging ended jobs (by their
// retention, by the finished-job cap, with their queue) needs their
// queue, id, idempotency key, status and place, not their payloads,
// results or events. Decoding each whole allocated all of it again, a
// burst of garbage per purge firing (up to 4,096 jobs of up to 1 MiB
// each) in the change whose point is to spare the collector.
func TestDroppingEndedJobsDecodesNoPayload(t *testing.T) {
	const jobs, payload = 16, 256 << 10
	h := newHarness(t, 6, 1, Limits{MaxFinished: jobs})
	h.Client("", &CreateQueue{Name: "b"})
	id := func(i int) string { return ids.FromUint64s(uint64(i), 6).String() }
	submit := func(q string, i, size int) {
		c := &Submit{JobID: id(i), Queue: q, Payload: make([]byte, size), RetentionNs: 1e9, IdempotencyKey: fmt.Sprint("k", i)}
		if r := h.Client("", c); r.Outcome != Created {
			t.Fatal(r.Msg)
		}
	}
	cancel := func(i int) {
		if r := h.Client("", &Cancel{JobID: id(i)}); r.Outcome != OK {
			t.Fatal(r.Msg)
		}
	}
	end := func(q string, i int) {
		submit(q, i, payload)
		cancel(i)
	}
	allocated := func(what string, f func()) {
		t.Helper()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		if n := after.TotalAlloc - before.TotalAlloc; n > jobs*payload/4 {
			t.Errorf("%s allocated %d bytes to drop %d jobs of %d-byte payloads", what, n, jobs, payload)
		}
	}
	for i := range jobs {
		end(DefaultQueue, i)
	}
	allocated("a purge", func() { h.Advance(2e9) })
	for i := range jobs {
		end("b", jobs+i)
	}
	allocated("deleting their queue", func() { h.Client("", &DeleteQueue{Name: "b", Force: true}) })
	for i := range jobs {
		end(DefaultQueue, 2*jobs+i)
	}
	for i := range jobs { // small jobs whose ends push the large ones out
		submit(DefaultQueue, 3*jobs+i, 10)
	}
	allocated("the finished-job cap", func() {
		for i := range jobs {
			cancel(3*jobs + i)
		}
	})
	if n := h.Machines[0].ended.len(); n != jobs {
		t.Fatalf("%d ended jobs, want %d", n, jobs)
	}
	checkEndedBooks(t, 0, h.Machines[0])
	h.CheckReplay()
}

// heldForks are forks of a machine taken during a run, each with the
// machine's own encoding at that moment, encoded later, after the
// machine went on: a fork must encode the state it was taken from.
type heldForks []heldFork

type heldFork struct {
	enc  func([]byte) []byte
	want []byte
	at   int
}

// take forks m at step.
func (fs *heldForks) take(m *Machine, step int) {
	*fs = append(*fs, heldFork{enc: m.ForkSnapshot(), want: m.AppendSnapshot(nil), at: step})
}

// check encodes every fork held, fails (saying when it checked) on one
// that encodes another state, and lets them go.
func (fs *heldForks) check(t *testing.T, when string) {
	t.Helper()
	for _, f := range *fs {
		if got := f.enc(nil); !bytes.Equal(got, f.want) {
			t.Fatalf("%s: the fork of step %d encodes another state", when, f.at)
		}
	}
	*fs = nil
}
