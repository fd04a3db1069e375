package jobs

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/engine/enginetest"
)

const enginePartitions = 4

func openEngine(t *testing.T, dir string, notify func(int, uint8, any)) *engine.Engine {
	return enginetest.OpenEngine(t, dir, engine.Options{Partitions: enginePartitions, Notify: notify}, &Workload{Partitions: enginePartitions})
}

// The machine on the real engine: commands routed by job id reach the
// queue's partition, the lease timer fires and gives the job back, notes
// arrive, and a restart rebuilds the same jobs from the log.
func TestJobsOnTheEngine(t *testing.T) {
	dir := t.TempDir()
	var mu sync.Mutex
	var notes []any
	eng := openEngine(t, dir, func(_ int, wl uint8, v any) {
		if wl == WorkloadID {
			mu.Lock()
			notes = append(notes, v)
			mu.Unlock()
		}
	})
	ctx := context.Background()
	do := func(key string, cmd engine.Command) *Result {
		t.Helper()
		v, err := eng.Do(ctx, eng.PartitionOf(key), WorkloadID, cmd)
		if err != nil {
			t.Fatal(err)
		}
		return v.(*Result)
	}
	get := func(e *engine.Engine, id string) *Job {
		t.Helper()
		v, err := e.Query(ctx, e.PartitionOf(JobKey(id)), WorkloadID, GetJob{ID: id})
		if err != nil {
			t.Fatal(err)
		}
		return v.(*Job)
	}
	rnd := rand.NewChaCha8([32]byte{3})
	var ids []string
	for _, q := range []string{DefaultQueue, "mail"} {
		if q != DefaultQueue {
			if r := do(QueueKey(q), &CreateQueue{Name: q}); r.Outcome != Created {
				t.Fatalf("create: %+v", r)
			}
		}
		for p := range int32(3) {
			id, err := NewJobID(q, enginePartitions, rnd)
			if err != nil {
				t.Fatal(err)
			}
			if r := do(QueueKey(q), &Submit{JobID: id, Queue: q, Priority: p}); r.Outcome != Created {
				t.Fatalf("submit: %+v", r)
			}
			ids = append(ids, id)
		}
	}
	// Highest priority first, on each queue.
	r := do(QueueKey("mail"), &Lease{Queue: "mail", Worker: "w", Max: 2, LeaseNs: int64(50 * time.Millisecond)})
	if len(r.Jobs) != 2 || r.Jobs[0].ID != ids[5] || r.Jobs[1].ID != ids[4] {
		t.Fatalf("lease: %+v", r.Jobs)
	}
	// Routed by the job id alone.
	if r := do(JobKey(ids[5]), &Report{JobID: ids[5], Worker: "w", Success: true}); r.Outcome != OK {
		t.Fatalf("report: %+v", r)
	}
	// The other lease runs out: the engine's timer gives the job back.
	deadline := time.Now().Add(10 * time.Second)
	for get(eng, ids[4]).Status != Pending {
		if time.Now().After(deadline) {
			t.Fatalf("lease never expired: %+v", get(eng, ids[4]))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if j := get(eng, ids[4]); j.RetryCount != 1 {
		t.Fatalf("expired lease not counted as a retry: %+v", j)
	}
	// Notes reach the observer on the log's completion goroutine, which
	// may run a moment after the query saw the expiry.
	count := func() (ended, ready int) {
		mu.Lock()
		defer mu.Unlock()
		for _, n := range notes {
			switch n := n.(type) {
			case JobEnded:
				if n.JobID == ids[5] && n.Status == Done {
					ended++
				}
			case QueueReady:
				ready++
			}
		}
		return ended, ready
	}
	for {
		ended, ready := count()
		if ended == 1 && ready >= 7 { // 6 submits and the expiry
			break
		}
		if ended > 1 || time.Now().After(deadline) {
			t.Fatalf("notes: %d ended, %d ready", ended, ready)
		}
		time.Sleep(5 * time.Millisecond)
	}
	before := map[string]Job{}
	for _, id := range ids {
		before[id] = *get(eng, id)
	}
	if err := eng.Close(); err != nil {
		t.Fatal(err)
	}
	eng2 := openEngine(t, dir, nil)
	defer eng2.Close()
	for id, want := range before {
		got := get(eng2, id)
		if got.Status != want.Status || got.RetryCount != want.RetryCount || got.Seq != want.Seq {
			t.Fatalf("job %s after restart: %+v, was %+v", id, got, want)
		}
	}
}
