package sequencer

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/engine/enginetest"
)

const enginePartitions = 4

// openAPIEngine is the engine of the API tests: embedded, or with
// SURGE_TEST_FORWARD set a cluster node that forwards every request.
func openAPIEngine(t testing.TB, notify func(int, uint8, any)) *engine.Engine {
	return enginetest.APIEngine(t, engine.Options{Partitions: enginePartitions, Notify: notify}, &Workload{})
}

func openEngine(t testing.TB, dir string, notify func(int, uint8, any)) *engine.Engine {
	return enginetest.OpenEngine(t, dir, engine.Options{Partitions: enginePartitions, Notify: notify}, &Workload{})
}

// The machine on the real engine: groups spread over partitions, a
// lease timer fires and gives a message back, a gap holds the output
// until it is filled, notes arrive once durable, and a restart (log
// replay, then a second one from the shutdown snapshot) rebuilds the
// same groups.
func TestSequencerOnTheEngine(t *testing.T) {
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
	do := func(e *engine.Engine, group string, cmd engine.Command) *Result {
		t.Helper()
		v, err := e.Do(ctx, e.PartitionOf(GroupKey(group)), WorkloadID, cmd)
		if err != nil {
			t.Fatal(err)
		}
		return v.(*Result)
	}
	info := func(e *engine.Engine, group string) *Info {
		t.Helper()
		v, err := e.Query(ctx, e.PartitionOf(GroupKey(group)), WorkloadID, GroupInfo{Group: group})
		if err != nil {
			t.Fatal(err)
		}
		return v.(*Info)
	}
	// Enough groups to reach every partition.
	var groups []string
	parts := map[int]bool{}
	for i := 0; len(parts) < enginePartitions; i++ {
		g := fmt.Sprint("grp", i)
		groups = append(groups, g)
		parts[eng.PartitionOf(GroupKey(g))] = true
	}
	for _, g := range groups {
		b := &PublishBatch{}
		for i := range 5 {
			b.Msgs = append(b.Msgs, Publish{Group: g, MsgID: fmt.Sprint(g, "-", i), Payload: []byte{byte(i)}})
		}
		if r := do(eng, g, b); r.Outcome != Created || r.Each[4].Seq != 5 {
			t.Fatalf("%s: batch %+v", g, r)
		}
		r := do(eng, g, &Lease{Group: g, Processor: "p", Max: 5, LeaseNs: int64(time.Hour)})
		if len(r.Messages) != 5 {
			t.Fatalf("%s: lease %+v", g, r)
		}
		for _, seq := range []uint64{2, 3, 1} {
			if r := do(eng, g, &Complete{Group: g, Seq: seq, Processor: "p"}); r.Outcome != OK {
				t.Fatalf("%s: complete %d: %+v", g, seq, r)
			}
		}
		if in := info(eng, g); in.Position != 3 || in.Leased != 2 || in.Released != 3 {
			t.Fatalf("%s: %+v", g, in)
		}
	}
	// A short lease runs out: the engine's timer gives the message back.
	cli := "client-seqs"
	for _, seq := range []uint64{1, 3} {
		if r := do(eng, cli, &Publish{Group: cli, MsgID: fmt.Sprint("c", seq), Seq: seq}); r.Outcome != Created {
			t.Fatalf("publish %d: %+v", seq, r)
		}
	}
	if r := do(eng, cli, &Lease{Group: cli, Processor: "slow", Max: 2, LeaseNs: int64(30 * time.Millisecond)}); len(r.Messages) != 2 {
		t.Fatalf("lease: %+v", r)
	}
	deadline := time.Now().Add(10 * time.Second) // for everything below
	for info(eng, cli).Pending != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("leases never expired: %+v", info(eng, cli))
		}
		time.Sleep(5 * time.Millisecond)
	}
	r := do(eng, cli, &Lease{Group: cli, Processor: "p", Max: 2, LeaseNs: int64(time.Hour)})
	for _, x := range r.Messages {
		do(eng, cli, &Complete{Group: cli, Seq: x.Seq, Processor: "p"})
	}
	if in := info(eng, cli); in.Position != 1 || in.Missing != 2 || in.Processed != 1 {
		t.Fatalf("gap at 2: %+v", in)
	}
	do(eng, cli, &Publish{Group: cli, MsgID: "c2", Seq: 2})
	r = do(eng, cli, &Lease{Group: cli, Processor: "p", Max: 1, LeaseNs: int64(time.Hour)})
	if r := do(eng, cli, &Complete{Group: cli, Seq: r.Messages[0].Seq, Processor: "p"}); r.Position != 3 {
		t.Fatalf("filled gap: %+v", r)
	}
	// Notes are handed over on the log's completion goroutine, maybe
	// after the reply: wait for them.
	countNotes := func() (ready, released int) {
		mu.Lock()
		defer mu.Unlock()
		for _, n := range notes {
			switch n := n.(type) {
			case Ready:
				ready++
			case Released:
				if n.Group == cli && n.Position == 3 {
					released++
				}
			}
		}
		return ready, released
	}
	for ready, released := countNotes(); ready < len(groups)+3 || released != 1; ready, released = countNotes() {
		if time.Now().After(deadline) {
			t.Fatalf("notes: %d ready, %d released at 3", ready, released)
		}
		time.Sleep(time.Millisecond)
	}
	groups = append(groups, cli)
	before := map[string]*Info{}
	for _, g := range groups {
		before[g] = info(eng, g)
	}
	// A crash-like stop (no snapshot: the log is replayed), then a clean
	// one (the snapshot is restored): both give the same groups.
	for round := range 2 {
		if round == 0 {
			if err := eng.Close(); err != nil {
				t.Fatal(err)
			}
			os.RemoveAll(filepath.Join(dir, "snap"))
		} else if err := eng.Close(); err != nil {
			t.Fatal(err)
		}
		eng = openEngine(t, dir, nil)
		for _, g := range groups {
			got, want := info(eng, g), before[g]
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("round %d, %s after restart: %+v, was %+v", round, g, got, want)
			}
		}
		v, err := eng.Query(ctx, eng.PartitionOf(GroupKey(cli)), WorkloadID, ReadOutput{Group: cli})
		if err != nil {
			t.Fatal(err)
		}
		out := v.(*Output)
		if len(out.Messages) != 3 || out.Messages[1].ID != "c2" || out.Messages[2].Released == 0 {
			t.Fatalf("output after restart: %+v", out)
		}
	}
	if err := eng.Close(); err != nil {
		t.Fatal(err)
	}
}
