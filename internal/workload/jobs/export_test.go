package jobs

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/surge-run/surge/internal/api"
)

// The tests keep every new ready job as a record (pending.go), so that
// the model tests take them through every path; TestLiveBacklog checks
// the product's backlog rule.
func init() { liveBacklog = 0 }

// SetClock makes the registry read time from now (tests drive it by hand).
func (h *Hub) SetClock(now func() time.Time) {
	h.mu.Lock()
	h.now = now
	h.mu.Unlock()
}

// allJobs is every job of the partition, live, kept as a pending record
// and ended (both decoded), by id. It checks the books of the pending
// records: each in its store's index at its place, each ready heap's
// count of ready jobs.
func (m *Machine) allJobs() map[string]*Job {
	all := maps.Clone(m.jobs)
	pending := 0
	for _, q := range m.queues {
		ready := [MaxPriority + 1]int{}
		for _, r := range q.order {
			if r.j == nil && r.seq != 0 {
				store := &m.ended
				if r.status == Pending {
					store = &m.pend
					pending++
				}
				_, j := store.decode(r.rec)
				if all[j.ID] != nil {
					panic("jobs: " + j.ID + " both live and a record")
				}
				if e, ok := store.get(keyOf(j.ID)); !ok || e.loc != r.rec || e.seq != r.seq || j.Status != r.status {
					panic(fmt.Sprintf("jobs: %s's ref %+v, index %+v (%v), status %s", j.ID, r, e, ok, j.Status))
				}
				if r.status == Pending && j.heapIdx < 0 {
					panic("jobs: pending record " + j.ID + " not ready")
				}
				all[j.ID] = j
				if r.status == Pending {
					ready[j.Priority]++
				}
			} else if r.j != nil && r.j.heapIdx >= 0 {
				ready[r.j.Priority]++
			}
		}
		for p := range ready {
			if ready[p] != q.ready[p].len() {
				panic(fmt.Sprintf("jobs: queue %s priority %d: %d ready jobs, its heap counts %d (%d entries, %d stale)",
					q.Name, p, ready[p], q.ready[p].len(), len(q.ready[p].e), q.ready[p].stale))
			}
		}
	}
	if pending != m.pend.len() {
		panic(fmt.Sprintf("jobs: %d pending records in the queues' order, %d in the index", pending, m.pend.len()))
	}
	if n := len(all) - len(m.jobs) - pending; n != m.ended.len() {
		panic(fmt.Sprintf("jobs: %d ended jobs in the queues' order, %d in the index", n, m.ended.len()))
	}
	return all
}

// HoldOpsTurns takes every operator list turn of a, with patience p for
// the lists that then wait, until the returned func gives them back.
func (a *API) HoldOpsTurns(n int, p time.Duration) (give func()) {
	a.opsTurns = api.NewTurns(n, p)
	for range n {
		a.opsTurns.Take(context.Background())
	}
	return func() {
		for range n {
			a.opsTurns.Give()
		}
	}
}
