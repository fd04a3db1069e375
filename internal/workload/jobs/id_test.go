package jobs

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/ids"
)

// Every id NewJobID draws is a version-4 UUID in the canonical form whose
// job key lands in the queue's partition, and the ids differ in every
// position (no byte is fixed by the search for the partition).
func TestNewJobIDLandsInTheQueuesPartition(t *testing.T) {
	r := rand.NewChaCha8([32]byte{7})
	for _, n := range []int{1, 2, 3, 8, 13, 64} {
		for _, q := range []string{DefaultQueue, "emails", "q-2"} {
			want := engine.PartitionOfHash(engine.Hash(QueueKey(q)), n)
			var first string
			varied := make([]bool, ids.Len)
			for range 200 {
				id, err := NewJobID(q, n, r)
				if err != nil {
					t.Fatal(err)
				}
				u, ok := ids.Parse(id)
				if !ok || u.String() != id || id[14] != '4' || id[19] < '8' || id[19] > 'b' {
					t.Fatalf("NewJobID = %q: not a canonical version-4 UUID", id)
				}
				if got := engine.PartitionOfHash(engine.Hash(JobKey(id)), n); got != want {
					t.Fatalf("NewJobID(%q, %d) = %q in partition %d, the queue's is %d", q, n, id, got, want)
				}
				if first == "" {
					first = id
				}
				for i := range varied {
					varied[i] = varied[i] || id[i] != first[i]
				}
			}
			for i, v := range varied {
				if !v && first[i] != '-' && i != 14 {
					t.Errorf("%d partitions: position %d of the ids never varied in 200 draws", n, i)
				}
			}
		}
	}
}

// A submit's id allocates only the id: the candidates are drawn, formatted
// and hashed on the stack.
func TestNewJobIDAllocatesOnlyTheID(t *testing.T) {
	r := rand.NewChaCha8([32]byte{1})
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := NewJobID(DefaultQueue, 8, r); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 1 {
		t.Errorf("NewJobID makes %.1f allocations, want 1 (the id)", allocs)
	}
}

// maxSubmitAllocs bounds the allocations of applying one Submit: what
// the new job keeps (the job, its first event), the note for waiting
// workers and the reply, one since createdReply (it was three), with the
// map, order and heap growth spread over many submits.
const maxSubmitAllocs = 4

// Applying a submit allocates what the new job keeps and one reply.
func TestSubmitAllocations(t *testing.T) {
	m := NewMachine(Options{OwnsDefault: true, Limits: Limits{MaxJobsPerQueue: 1 << 20}})
	fx := new(engine.Effects)
	subs := make([]Submit, 20_000)
	for i := range subs {
		subs[i] = Submit{JobID: fmt.Sprintf("%08x-0000-4000-8000-000000000000", i), Queue: DefaultQueue}
	}
	i := 0
	allocs := testing.AllocsPerRun(len(subs)-1, func() {
		fx.Reset()
		m.Apply(&engine.Input{Kind: engine.FromClient, TimeNs: 1, Cmd: &subs[i]}, fx)
		i++
	})
	if res := fx.Replied(); res == nil || res.(*Result).Outcome != Created {
		t.Fatalf("the last submit answered %+v", res)
	}
	if allocs > maxSubmitAllocs {
		t.Errorf("a submit makes %.2f allocations, want at most %d", allocs, maxSubmitAllocs)
	}
	t.Logf("%.2f allocations per submit", allocs)
}

// PutJobID draws the same ids as NewJobID from the same source, into the
// caller's array, without allocating.
func TestPutJobIDIsNewJobIDInPlace(t *testing.T) {
	a, b := rand.NewChaCha8([32]byte{3}), rand.NewChaCha8([32]byte{3})
	for range 100 {
		want, err := NewJobID("emails", 8, a)
		if err != nil {
			t.Fatal(err)
		}
		var got [ids.Len]byte
		if err := PutJobID(&got, "emails", 8, b); err != nil || string(got[:]) != want {
			t.Fatalf("PutJobID = %q, %v; NewJobID drew %q", got, err, want)
		}
	}
	var id [ids.Len]byte
	if n := testing.AllocsPerRun(1000, func() { _ = PutJobID(&id, DefaultQueue, 8, a) }); n != 0 {
		t.Errorf("PutJobID makes %.1f allocations, want none", n)
	}
	if err := PutJobID(&id, DefaultQueue, 0, a); err == nil {
		t.Error("no error for 0 partitions")
	}
}
