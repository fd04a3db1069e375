package sequencer

import (
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/surge-run/surge/internal/engine"
)

// commit records how far a consumer has read. Going back is refused: a
// committed position is what purging may rely on, and an at-least-once
// reader re-reads from its own position without committing.
func (m *Machine) commit(c *Commit, now int64) *Result {
	g, r := m.group(c.Group)
	if r != nil {
		return r
	}
	if c.Consumer == "" || len(c.Consumer) > MaxIDLen {
		return fail(Invalid, "sequencer: consumer id must be 1 to %d bytes", MaxIDLen)
	}
	if c.Position > g.position {
		return fail(Invalid, "sequencer: position %d is past the released position %d of group %q", c.Position, g.position, g.Name)
	}
	old, known := g.consumers[c.Consumer]
	switch {
	case known && c.Position == old:
		return &Result{Outcome: Same, Position: g.position}
	case known && c.Position < old:
		return fail(Conflict, "sequencer: consumer %q of group %q committed %d; it cannot go back to %d", c.Consumer, g.Name, old, c.Position)
	case !known && len(g.consumers) >= m.opts.Limits.MaxConsumers:
		return fail(Exhausted, "sequencer: at most %d consumers per group", m.opts.Limits.MaxConsumers)
	}
	g.consumers[c.Consumer] = c.Position
	res := &Result{Outcome: OK, Position: g.position}
	if n := m.purgeFront(g, now); n > 0 {
		res.Msg = fmt.Sprintf("purged %d", n)
	}
	return res
}

func (g *Group) minCommitted() (uint64, bool) {
	if len(g.consumers) == 0 {
		return 0, false
	}
	low := uint64(math.MaxUint64)
	for _, p := range g.consumers {
		low = min(low, p)
	}
	return low, true
}

func (m *Machine) deleteGroup(c *DeleteGroup, fx *engine.Effects) *Result {
	g, r := m.group(c.Group)
	if r != nil {
		return r
	}
	// In order: effects must not follow the map's order.
	for _, proc := range slices.Sorted(maps.Keys(g.leases)) {
		for _, seq := range g.leasedBy(proc) {
			fx.CancelTimer(leaseTimerID(g.Name, seq))
		}
	}
	// Its purge entries stay queued; purgeFront finds no group and they
	// go when due.
	delete(m.groups, c.Group)
	m.out -= g.out
	m.held -= g.held
	return &Result{Outcome: OK}
}
