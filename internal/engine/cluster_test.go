package engine_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/engine/enginetest"
	"github.com/surge-run/surge/internal/workload/ticketing"
)

// cluster is an in-process cluster of bank nodes sharing one store.
type cluster struct {
	t     *testing.T
	store *enginetest.Store
	net   *enginetest.Net
	nodes []*engine.Engine
}

func newCluster(t *testing.T, nodes, partitions, snapEvery int) *cluster {
	c := &cluster{t: t, store: enginetest.NewStore(), net: &enginetest.Net{}}
	for i := range nodes {
		e, err := engine.Open(engine.Options{
			Partitions: partitions, Snapshots: c.store, Logger: quiet, SnapshotEvery: snapEvery,
			Cluster: &engine.Cluster{Transport: c.net.Transport(i), ResendAfter: 100 * time.Millisecond, ForwardTimeout: 10 * time.Second},
		}, bank{})
		if err != nil {
			t.Fatal(err)
		}
		c.net.Add(e)
		c.nodes = append(c.nodes, e)
	}
	t.Cleanup(func() {
		for _, e := range c.nodes {
			if err := e.Close(); err != nil {
				t.Error(err)
			}
		}
	})
	return c
}

// acquire makes node n the owner of part, fencing any earlier one.
func (c *cluster) acquire(n, part int) {
	c.t.Helper()
	if err := c.nodes[n].Acquire(part, c.store.Open(part)); err != nil {
		c.t.Fatal(err)
	}
}

// collect gathers every partition on node n and reads the tallies there.
func (c *cluster) collect(n int) (debited, credited map[uint64]tally) {
	c.t.Helper()
	for i, e := range c.nodes {
		if i == n {
			continue
		}
		for _, p := range e.Owned() {
			if err := e.Release(p); err != nil {
				c.t.Fatal(err)
			}
		}
	}
	owned := map[int]bool{}
	for _, p := range c.nodes[n].Owned() {
		owned[p] = true
	}
	for p := range c.nodes[n].Partitions() {
		if !owned[p] {
			c.acquire(n, p)
		}
	}
	// Under the race detector a backlog of re-sends can take longer than
	// transfersByID waits; a stuck message never arrives however long.
	for range 3 {
		debited, credited = transfersByID(c.t, c.nodes[n])
		if len(credited) >= len(debited) {
			break
		}
	}
	return debited, credited
}

// Transfers between partitions are sent through every node while
// partitions move: one node is fenced abruptly (its logs reopened by
// another, as when a node is declared dead while still running), another
// hands a partition over gracefully. Every acknowledged transfer is
// debited exactly once and credited exactly once, whichever nodes its
// debit and credit were applied on.
func TestClusterTransfersExactlyOnceWhilePartitionsMove(t *testing.T) {
	c := newCluster(t, 3, 4, 40)
	c.acquire(0, 0)
	c.acquire(0, 1)
	c.acquire(1, 2)
	c.acquire(1, 3)

	var (
		acked   sync.Map
		nextID  atomic.Uint64
		stopped atomic.Bool
		wg      sync.WaitGroup
		errs    atomic.Int64
	)
	deadNode := atomic.Int32{}
	deadNode.Store(-1)
	for g := range 6 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			for !stopped.Load() {
				n := rng.IntN(3)
				if int32(n) == deadNode.Load() {
					continue
				}
				e := c.nodes[n]
				from, to := keys[rng.IntN(len(keys))], keys[rng.IntN(len(keys))]
				id := nextID.Add(1)
				_, err := e.Do(context.Background(), e.PartitionOf(from), 7, &transfer{From: from, To: to, N: 1, ID: id})
				if err == nil {
					acked.Store(id, true)
				} else if !errors.Is(err, engine.ErrNotOwner) && !errors.Is(err, engine.ErrOutcomeUnknown) {
					t.Errorf("transfer %d through node %d: %v", id, n, err)
					return
				} else {
					errs.Add(1)
				}
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	// Node 0 is declared dead while it runs: node 2 opens its logs, which
	// fences it; nobody calls it any more, but it keeps trying to serve
	// what it had.
	deadNode.Store(0)
	c.net.SetDown(0, true)
	c.acquire(2, 0)
	c.acquire(2, 1)
	time.Sleep(300 * time.Millisecond)
	// Node 1 hands partition 3 over gracefully.
	if err := c.nodes[1].Release(3); err != nil {
		t.Fatal(err)
	}
	c.acquire(2, 3)
	time.Sleep(300 * time.Millisecond)
	stopped.Store(true)
	wg.Wait()
	c.net.SetDown(0, false)

	debited, credited := c.collect(2)
	missing := 0
	acked.Range(func(k, _ any) bool {
		if _, ok := debited[k.(uint64)]; !ok {
			missing++
		}
		return true
	})
	if missing > 0 {
		t.Fatalf("%d acknowledged transfers are not in the log", missing)
	}
	checkExactlyOnce(t, "", debited, credited)
	n := 0
	acked.Range(func(any, any) bool { n++; return true })
	if n < 100 {
		t.Fatalf("only %d transfers were acknowledged; the test did not exercise much", n)
	}
	t.Logf("%d transfers acknowledged, %d debited, %d refused as retryable", n, len(debited), errs.Load())
}

// A request queued at a node whose log is fenced is not lost and not
// answered as done: it is applied by the new owner.
func TestClusterFencedOwnerForwardsWhatItHeld(t *testing.T) {
	c := newCluster(t, 2, 1, 1000)
	c.acquire(0, 0)
	mustDo(t, c.nodes[0], 0, &transfer{From: "a", To: "a", N: 1, ID: 1})
	// Node 1 takes the partition; node 0 does not know yet.
	c.acquire(1, 0)
	if _, err := c.nodes[0].Do(context.Background(), 0, 7, &transfer{From: "a", To: "a", N: 1, ID: 2}); err != nil {
		t.Fatalf("a request at the fenced node should be passed to the new owner: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(c.nodes[0].Owned()) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the fenced node still claims the partition")
		}
		time.Sleep(5 * time.Millisecond)
	}
	debited, credited := transfersByID(t, c.nodes[1])
	if len(debited) != 2 {
		t.Fatalf("the new owner has %d transfers, want 2", len(debited))
	}
	checkExactlyOnce(t, "", debited, credited)
}

// Handing a partition over keeps its state (from the hand-over snapshot
// and the log), and the log after a snapshot is enough.
func TestClusterHandOverKeepsState(t *testing.T) {
	c := newCluster(t, 2, 2, 10)
	c.acquire(0, 0)
	c.acquire(0, 1)
	for i := range 50 {
		mustDo(t, c.nodes[1], c.nodes[1].PartitionOf("a"), &transfer{From: "a", To: "b", N: 1, ID: uint64(i + 1)})
	}
	for p := range 2 {
		if err := c.nodes[0].Release(p); err != nil {
			t.Fatal(err)
		}
		// Retention may now drop everything the hand-over snapshot covers.
		c.store.Trim(p, c.store.Records(p))
		c.acquire(1, p)
	}
	debits, credits, _ := settle(t, c.nodes[1])
	if debits != 50 || credits != 50 {
		t.Fatalf("after hand-over: debits %d credits %d, want 50 and 50", debits, credits)
	}
}

// A node refuses to serve a partition whose log no longer holds what its
// snapshot does not cover.
func TestClusterAcquireRefusesMissingRecords(t *testing.T) {
	c := newCluster(t, 1, 1, 1000)
	c.acquire(0, 0)
	mustDo(t, c.nodes[0], 0, &transfer{From: "a", To: "a", N: 1})
	// Lost without a hand-over: no snapshot, then retention.
	c.store.Open(0).Close() // fences node 0
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	c.nodes[0].Do(ctx, 0, 7, &transfer{From: "a", To: "a", N: 1}) // finds it fenced
	c.store.Trim(0, 1)
	for len(c.nodes[0].Owned()) != 0 {
		time.Sleep(5 * time.Millisecond)
	}
	err := c.nodes[0].Acquire(0, c.store.Open(0))
	if err == nil || !strings.Contains(err.Error(), "retention") {
		t.Fatalf("Acquire with records missing: %v, want a refusal naming retention", err)
	}
	if len(c.nodes[0].Owned()) != 0 {
		t.Fatal("the partition is served after a refused Acquire")
	}
}

// Messages that a new owner learns from the log (replay, no snapshot) are
// sent again until their receiver has an owner and takes them.
func TestClusterReplayedMessagesAreResent(t *testing.T) {
	c := newCluster(t, 2, 2, 1_000_000)
	c.acquire(0, 0)
	from, to := "", ""
	for _, k := range keys {
		switch c.nodes[0].PartitionOf(k) {
		case 0:
			from = k
		case 1:
			to = k
		}
	}
	// Partition 1 has no owner: the credits cannot be delivered yet.
	for i := range 5 {
		mustDo(t, c.nodes[0], 0, &transfer{From: from, To: to, N: 1, ID: uint64(i + 1)})
	}
	// Node 0 is cut off (its own re-sends cannot help); node 1 takes
	// partition 0 over from the log alone, then serves 1.
	c.net.Isolate(0)
	c.acquire(1, 0)
	c.acquire(1, 1)
	debited, credited := transfersByID(t, c.nodes[1])
	if len(debited) != 5 {
		t.Fatalf("%d transfers debited, want 5", len(debited))
	}
	checkExactlyOnce(t, "", debited, credited)
}

// A node serves a partition again after handing it over (its processor
// and batches are reused).
func TestClusterReacquireOnTheSameNode(t *testing.T) {
	c := newCluster(t, 2, 1, 1000)
	c.acquire(0, 0)
	mustDo(t, c.nodes[0], 0, &transfer{From: "a", To: "a", N: 1, ID: 1})
	for i, n := range []int{1, 0, 1} {
		if err := c.nodes[1-n].Release(0); err != nil {
			t.Fatal(err)
		}
		c.acquire(n, 0)
		mustDo(t, c.nodes[n], 0, &transfer{From: "a", To: "a", N: 1, ID: uint64(i + 2)})
	}
	debited, credited := transfersByID(t, c.nodes[1])
	if len(debited) != 4 {
		t.Fatalf("%d transfers debited, want 4", len(debited))
	}
	checkExactlyOnce(t, "", debited, credited)
}

// Whatever another node (or anything reaching the internal endpoint)
// sends, HandleRemote answers without panicking, and a well-formed batch
// is still served afterwards. (Ticketing, not the bank: the bank has
// commands that block their partition on purpose.)
func FuzzHandleRemote(f *testing.F) {
	c := newFuzzCluster(f)
	cmd, _ := (&ticketing.Cancel{ID: [16]byte{1}}).AppendBinary(nil)
	good := forwardedBatch(0, ticketing.WorkloadID, cmd)
	f.Add(good)
	f.Add([]byte{1, 5, 0, 0, 0, 0, 0, 255, 255, 255, 255})
	f.Add([]byte{1, 3, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0})
	f.Add([]byte{1, 2, 0, 0, 0, 0, 7, 0xff})
	f.Add([]byte{1, 4, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, body []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if ans := c.nodes[0].HandleRemote(ctx, body); len(ans) == 0 {
			t.Fatal("empty answer")
		}
		if ans := c.nodes[0].HandleRemote(ctx, good); len(ans) < 6 || ans[0] != 0 || ans[5] != 0 {
			t.Fatalf("a good batch after %x was answered %x", body, ans)
		}
	})
}

func newFuzzCluster(f *testing.F) *cluster {
	store, net := enginetest.NewStore(), &enginetest.Net{}
	e, err := engine.Open(engine.Options{Partitions: 1, Snapshots: store, Logger: quiet,
		Cluster: &engine.Cluster{Transport: net.Transport(0), ForwardTimeout: 100 * time.Millisecond}}, ticketing.Workload{})
	if err != nil {
		f.Fatal(err)
	}
	net.Add(e)
	f.Cleanup(func() { e.Close() })
	if err := e.Acquire(0, store.Open(0)); err != nil {
		f.Fatal(err)
	}
	return &cluster{store: store, net: net, nodes: []*engine.Engine{e}}
}

// forwardedBatch is a batch of one command, as a forwarding node sends it.
func forwardedBatch(part int, wl uint8, cmd []byte) []byte {
	b := []byte{1, 5, byte(part), byte(part >> 8), byte(part >> 16), byte(part >> 24), 0, 1, 0, 0, 0, 1, wl}
	n := len(cmd)
	b = append(b, byte(n), byte(n>>8), byte(n>>16), byte(n>>24))
	return append(b, cmd...)
}

// Every takeover is counted, and timed, per partition: the gauge of owned
// partitions alone cannot show one that left and came back between two
// scrapes.
func TestClusterTakeoversAreCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	store, net := enginetest.NewStore(), &enginetest.Net{}
	e, err := engine.Open(engine.Options{Partitions: 2, Snapshots: store, Logger: quiet, Metrics: engine.NewMetrics(reg),
		Cluster: &engine.Cluster{Transport: net.Transport(0), ForwardTimeout: time.Second}}, bank{})
	if err != nil {
		t.Fatal(err)
	}
	net.Add(e)
	t.Cleanup(func() { e.Close() })
	for _, step := range []struct {
		acquire bool
		part    int
	}{{true, 0}, {true, 1}, {false, 0}, {true, 0}} {
		if step.acquire {
			err = e.Acquire(step.part, store.Open(step.part))
		} else {
			err = e.Release(step.part)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			key := f.GetName()
			for _, l := range m.GetLabel() {
				key += "/" + l.GetValue()
			}
			switch {
			case m.Counter != nil:
				got[key] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				got[key] = m.GetGauge().GetValue()
			case m.Histogram != nil:
				got[key] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	for key, want := range map[string]float64{"surge_partition_acquired_total/0": 2, "surge_partition_acquired_total/1": 1,
		"surge_partition_acquire_seconds": 3, "surge_partition_owned/0": 1, "surge_partition_owned/1": 1} {
		if got[key] != want {
			t.Errorf("%s = %v, want %v", key, got[key], want)
		}
	}
}
