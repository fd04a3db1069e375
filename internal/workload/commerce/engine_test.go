package commerce

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/engine/enginetest"
)

func openEngine(t *testing.T, dir string) *engine.Engine {
	return enginetest.OpenEngine(t, dir, engine.Options{Partitions: 4}, Workload{})
}

// The saga on the real engine: messages between partitions, the deadline
// timer, the log, and a restart that rebuilds the same state.
func TestSagasOnTheEngine(t *testing.T) {
	dir := t.TempDir()
	eng := openEngine(t, dir)
	ctx := context.Background()
	do := func(key string, cmd engine.Command) *Result {
		t.Helper()
		v, err := eng.Do(ctx, eng.PartitionOf(key), WorkloadID, cmd)
		if err != nil {
			t.Fatal(err)
		}
		return v.(*Result)
	}
	getOrder := func(e *engine.Engine, id string) *Order {
		t.Helper()
		v, err := e.Query(ctx, e.PartitionOf(OrderKey(id)), WorkloadID, &GetOrder{ID: id})
		if err != nil {
			t.Fatal(err)
		}
		return v.(*Order)
	}
	for _, p := range []string{"a", "b", "c"} {
		do(ProductKey(p), &CreateProduct{ID: p, SKU: p, Name: p, PriceCents: 100, OnHand: 10})
	}
	const n = 12 // 10 units of each product: the later orders cannot all be served
	for i := range n {
		id := fmt.Sprintf("o%d", i)
		c := order(id, "CREDIT_CARD", LineItem{ProductID: "a", Quantity: 1, UnitPriceCents: 100}, LineItem{ProductID: []string{"b", "c"}[i%2], Quantity: 2, UnitPriceCents: 100})
		if i == n-1 {
			c.DeadlineNs = 1 // expires at once unless the saga beats its timer
		}
		if res := do(OrderKey(id), c); res.Outcome != Created {
			t.Fatalf("%+v", res)
		}
	}
	final := map[string]string{}
	deadline := time.Now().Add(30 * time.Second)
	for i := range n {
		id := fmt.Sprintf("o%d", i)
		for {
			if o := getOrder(eng, id); o.Status != OrderPending {
				final[id] = o.Status
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("order %s still PENDING", id)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	confirmed := 0
	for _, s := range final {
		if s == OrderConfirmed {
			confirmed++
		}
	}
	if confirmed == 0 || confirmed == n {
		t.Fatalf("%d of %d confirmed; want some but not all (stock runs out)", confirmed, n)
	}
	// Units held are exactly those of the confirmed orders, which stay
	// reserved (the peer's stock model); releases land after the orders
	// end: wait for them, then restart from the log.
	sold := map[string]int64{}
	for i := range n {
		if final[fmt.Sprintf("o%d", i)] == OrderConfirmed {
			sold["a"]++
			sold[[]string{"b", "c"}[i%2]] += 2
		}
	}
	before := map[string]Product{}
	for _, p := range []string{"a", "b", "c"} {
		for {
			v, _ := eng.Query(ctx, eng.PartitionOf(ProductKey(p)), WorkloadID, &GetProduct{ID: p})
			before[p] = *v.(*Product)
			if before[p].Reserved == sold[p] {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("product %s keeps reservations: %+v", p, before[p])
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	for p, pr := range before {
		if pr.OnHand != 10 {
			t.Fatalf("product %s: onHand %d, want 10 (only a replenish changes it)", p, pr.OnHand)
		}
	}
	if err := eng.Close(); err != nil {
		t.Fatal(err)
	}
	eng2 := openEngine(t, dir)
	defer eng2.Close()
	for id, s := range final {
		if o := getOrder(eng2, id); o.Status != s {
			t.Fatalf("order %s was %s, after restart %s", id, s, o.Status)
		}
	}
	for p, want := range before {
		v, _ := eng2.Query(ctx, eng2.PartitionOf(ProductKey(p)), WorkloadID, &GetProduct{ID: p})
		if got := *v.(*Product); got.OnHand != want.OnHand || got.Reserved != want.Reserved {
			t.Fatalf("product %s: %+v after restart, was %+v", p, got, want)
		}
	}
}
