package jobs

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/surge-run/surge/internal/ids"
	"github.com/surge-run/surge/internal/wire"
)

// endedRecord is what the store must give back for a job put into it.
func endedRecord(queue string, j *Job) []byte {
	w := wire.Writer{}
	w.Str(queue)
	w.Str(j.IdemKey)
	j.code(&wire.Coder{W: &w, Version: snapshotVersion})
	return w.B
}

// TestEndedJobsMatchAMap drives the ended-job store with random puts,
// deletes and compactions, against a map of the records each job must
// decode to. It checks, after every step, that every job kept reads
// back as it was put, that compaction tells the mover every record it
// moves (the queues' order follows it), that memory follows what is
// kept (no chunk but the current one under a quarter live after a
// compaction), and that a view taken earlier still reads its records
// unchanged while the store moves and frees them.
func TestEndedJobsMatchAMap(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { endedJobsRun(t, seed) })
	}
}

func endedJobsRun(t *testing.T, seed uint64) {
	rnd := rand.New(rand.NewPCG(seed, 7))
	s := newEndedJobs()
	type kept struct {
		rec []byte
		loc recLoc
	}
	model := map[string]*kept{}
	var keys []string
	var view endedJobs
	var viewed map[recLoc][]byte
	seq := uint64(0)
	for step := range 1500 {
		switch op := rnd.IntN(10); {
		case op < 6 || len(keys) == 0: // a job ends
			seq++
			id := ids.FromUint64s(rnd.Uint64(), seq).String()
			if rnd.IntN(20) == 0 {
				id = fmt.Sprintf("job-%d", seq) // not a UUID
			}
			n := rnd.IntN(300)
			if rnd.IntN(200) == 0 {
				n = endedChunkBytes + rnd.IntN(1000) // a record larger than a chunk
			}
			j := &Job{ID: id, Queue: "q", Payload: bytes.Repeat([]byte{byte(seq)}, n), Status: Done, Seq: seq,
				purgeAt: int64(seq), heapIdx: -1, Events: []JobEvent{{ID: 1, From: Pending, To: Assigned, Worker: "w"}}}
			e := s.put("q", j)
			if e.seq != seq || e.purgeAt != int64(seq) || e.status != Done {
				t.Fatalf("step %d: entry %+v", step, e)
			}
			model[id] = &kept{rec: endedRecord("q", j), loc: e.loc}
			keys = append(keys, id)
		case op < 9: // a job is purged or retried
			i := rnd.IntN(len(keys))
			id := keys[i]
			keys[i] = keys[len(keys)-1]
			keys = keys[:len(keys)-1]
			k := keyOf(id)
			e, ok := s.get(k)
			if !ok {
				t.Fatalf("step %d: %s missing", step, id)
			}
			s.del(k, e)
			delete(model, id)
		default: // the end of a command: compaction
			s.compact(func(queue string, seq uint64, to recLoc) {
				_, j := decodeRecord(s.rec(to))
				m := model[j.ID]
				if queue != "q" || m == nil || j.Seq != seq {
					t.Fatalf("step %d: moved %q %d (%s), not kept", step, queue, seq, j.ID)
				}
				m.loc = to
			})
			checkEndedMemory(t, step, &s)
			if rnd.IntN(4) == 0 { // a snapshot forks
				view, viewed = s.view(), map[recLoc][]byte{}
				for _, m := range model {
					viewed[m.loc] = m.rec
				}
			}
		}
		if s.len() != len(model) {
			t.Fatalf("step %d: %d kept, model %d", step, s.len(), len(model))
		}
		live := int64(0)
		for _, m := range model {
			live += int64(len(m.rec))
		}
		if s.live != live {
			t.Fatalf("step %d: the store counts %d live bytes, its records are %d", step, s.live, live)
		}
		if step%10 != 0 {
			continue
		}
		for id, m := range model {
			e, ok := s.get(keyOf(id))
			if !ok || e.loc != m.loc || !bytes.Equal(s.rec(e.loc), m.rec) {
				t.Fatalf("step %d: %s reads back wrong (entry %+v, model at %+v)", step, id, e, m.loc)
			}
		}
		for l, rec := range viewed {
			if !bytes.Equal(view.rec(l), rec) {
				t.Fatalf("step %d: a view's record at %+v changed", step, l)
			}
		}
	}
	for id, m := range model {
		q, j := decodeRecord(m.rec)
		if q != "q" || j.ID != id || !bytes.Equal(jobBytes(m.rec), m.rec[len(m.rec)-len(jobBytes(m.rec)):]) {
			t.Fatalf("%s: decodes as %q %s", id, q, j.ID)
		}
	}
}

// checkEndedMemory: after a compaction, no chunk but the current one is
// less than a quarter live (of its capacity, length prefixes aside), and a
// chunk with nothing live is gone.
func checkEndedMemory(t *testing.T, step int, s *endedJobs) {
	t.Helper()
	for i, c := range s.chunks {
		if c == nil || i == s.cur {
			continue
		}
		if c.live == 0 || c.live*4 < cap(c.b)-cap(c.b)/16 {
			t.Fatalf("step %d: chunk %d holds %d live bytes of %d after compaction", step, i, c.live, cap(c.b))
		}
	}
}

// A job's id is kept as its 16 bytes only when that gives the id back
// exactly; any other id is kept as it is. (Ids are never empty: submits
// and snapshots with one are refused.)
func TestJobKeysGiveTheIDBack(t *testing.T) {
	u := ids.FromUint64s(1, 2).String()
	for _, id := range []string{u, "A" + u[1:], u[:35], u + "0", "x", "00000000-0000-0000-0000-000000000000"} {
		k := keyOf(id)
		if k.id() != id {
			t.Errorf("keyOf(%q).id() = %q", id, k.id())
		}
		if uuid := k.other == "" && id != ""; uuid != (id == u || id == "00000000-0000-0000-0000-000000000000") {
			t.Errorf("keyOf(%q) = %+v", id, k)
		}
	}
}

// After most ended jobs leave (retried here; purged in a run), the
// partition compacts its chunks: memory follows the jobs kept, and every
// kept job still lists, reads and snapshots as it was (the queues' order
// followed each move).
func TestEndedChunksCompactAfterRemovals(t *testing.T) {
	const jobs = 4000
	h := newHarness(t, 3, 1, Limits{MaxJobsPerQueue: jobs})
	m := func() *Machine { return h.Machines[0] }
	payload := func(i int) []byte { return bytes.Repeat([]byte{byte(i)}, 200+i%50) }
	id := func(i int) string { return ids.FromUint64s(uint64(i), 1).String() }
	for i := range jobs {
		if r := h.Client("", &Submit{JobID: id(i), Queue: DefaultQueue, Payload: payload(i)}); r.Outcome != Created {
			t.Fatal(r.Msg)
		}
	}
	for i := range jobs {
		if r := h.Client("", &Cancel{JobID: id(i)}); r.Outcome != OK {
			t.Fatal(r.Msg)
		}
	}
	chunkBytes := func() (n, live int) {
		for _, c := range m().ended.chunks {
			if c != nil {
				n += cap(c.b)
				live += c.live
			}
		}
		return n, live
	}
	before, _ := chunkBytes()
	for i := range jobs {
		if i%8 != 7 {
			if r := h.Client("", &Retry{JobID: id(i)}); r.Outcome != OK {
				t.Fatal(r.Msg)
			}
		}
	}
	if n := m().ended.len(); n != jobs/8 || len(m().jobs) != jobs-jobs/8 {
		t.Fatalf("%d ended and %d live jobs, want %d and %d", n, len(m().jobs), jobs/8, jobs-jobs/8)
	}
	if after, live := chunkBytes(); after > 4*live+2*endedChunkBytes {
		t.Fatalf("chunks hold %d bytes for %d live (%d before the retries)", after, live, before)
	}
	seen := 0
	for page := (ListJobs{Queue: DefaultQueue, Status: DeadLettered, Limit: 100}); ; {
		p := m().Query(page).(*JobPage)
		for _, j := range p.Jobs {
			i := int(j.Seq - 1)
			if i%8 != 7 || j.ID != id(i) || !bytes.Equal(j.Payload, payload(i)) || j.DeadReason != ReasonCancelled {
				t.Fatalf("listed job %d: %+v", i, j)
			}
			got := m().Query(GetJob{ID: j.ID}).(*Job)
			if got == nil || got.Seq != j.Seq || !bytes.Equal(got.Payload, j.Payload) {
				t.Fatalf("GetJob(%s) = %+v", j.ID, got)
			}
			seen++
		}
		if p.NextPageToken == "" {
			break
		}
		page.PageToken = p.NextPageToken
	}
	if seen != jobs/8 {
		t.Fatalf("listed %d jobs, want %d", seen, jobs/8)
	}
	h.CheckReplay()
}
