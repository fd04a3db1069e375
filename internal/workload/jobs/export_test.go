package jobs

import (
	"fmt"
	"maps"
	"time"
)

// SetClock makes the registry read time from now (tests drive it by hand).
func (h *Hub) SetClock(now func() time.Time) {
	h.mu.Lock()
	h.now = now
	h.mu.Unlock()
}

// allJobs is every job of the partition, live and ended (decoded), by id.
func (m *Machine) allJobs() map[string]*Job {
	all := maps.Clone(m.jobs)
	for _, q := range m.queues {
		for _, r := range q.order {
			if r.j == nil && r.seq != 0 {
				_, j := m.ended.decode(r.rec)
				if all[j.ID] != nil {
					panic("jobs: " + j.ID + " both live and ended")
				}
				all[j.ID] = j
			}
		}
	}
	if n := len(all) - len(m.jobs); n != m.ended.len() {
		panic(fmt.Sprintf("jobs: %d ended jobs in the queues' order, %d in the index", n, m.ended.len()))
	}
	return all
}
