package sequencer

import (
	"fmt"
	"math"
	"slices"

	"github.com/surge-run/surge/internal/engine"
)

// A released message is purged once every consumer of its group has
// committed past it, or once its retention (logged in its Publish, so
// replay purges what the live run purged) has run out since release,
// whichever is first. A group without consumers keeps its output for the
// retention: there is nobody whose progress says it was read. Purging
// takes the window's front only, so a message whose retention ran out
// waits behind one kept longer; with one retention per group (the API's
// flag) that never happens. As in jobs, one timer per partition serves a
// FIFO of released runs instead of a timer per message.
const (
	purgeTimerID      = "sequencer/purge"
	maxPurgePerFiring = 4096
)

func (m *Machine) queuePurge(group string, at int64, fx *engine.Effects) {
	e := purgeEntry{Group: group, At: at}
	if last, ok := m.purgeQ.Back(); ok && last == e {
		return
	}
	if m.purgeQ.Push(e) {
		m.setTimer(fx, purgeTimerID, at, &PurgeMessages{})
	}
}

// purgeFront drops the group's released messages from the front while
// each is passed by every consumer or past its retention.
func (m *Machine) purgeFront(g *Group, now int64) int {
	low, consumed := g.minCommitted()
	n := 0
	for g.base <= g.position {
		x := g.at(g.base)
		if !(consumed && low >= g.base) && addSat(x.Released, x.RetentionNs) > now {
			break
		}
		m.dropFront(g)
		n++
	}
	return n
}

// dropFront purges the group's oldest released message.
func (m *Machine) dropFront(g *Group) {
	x := g.at(g.base)
	delete(g.ids, x.ID)
	g.counts[MsgReleased]--
	c := outCost(x)
	g.out -= c
	m.out -= c
	if c := g.chunks[0]; c.gen == g.gen {
		*x = msg{} // let the payload go now, unless a fork shares it
	}
	g.base++
	// A chunk goes once its last slot is purged.
	if (g.base-1)>>chunkShift > g.c0 && len(g.chunks) > 0 {
		g.chunks[0] = nil
		g.chunks = g.chunks[1:]
		g.c0++
	}
	if cap(g.chunks) > 2*len(g.chunks)+16 {
		g.chunks = slices.Clone(g.chunks)
	}
}

// trimOutput purges the oldest released messages early, from the group
// whose run was released first, while the partition keeps more than
// Limits.MaxOutputBytes of them. A consumer still behind them finds them
// gone, as after their retention: a read says where its group's output
// now starts (FirstKept). The entry of a group with nothing left to
// purge goes; a group that releases again queues a new one.
func (m *Machine) trimOutput() {
	for m.out > m.opts.Limits.MaxOutputBytes {
		e, ok := m.purgeQ.Front()
		if !ok {
			return
		}
		if g := m.groups[e.Group]; g != nil && g.base <= g.position {
			m.dropFront(g)
			continue
		}
		m.purgeQ.Pop()
	}
}

func (m *Machine) purge(now int64, fx *engine.Effects) *Result {
	n := 0
	m.purgeQ.PopDue(now, maxPurgePerFiring, func(e purgeEntry) {
		if g := m.groups[e.Group]; g != nil {
			n += m.purgeFront(g, now)
		}
	})
	if at, ok := m.purgeQ.Next(); ok {
		m.setTimer(fx, purgeTimerID, max(at, now), &PurgeMessages{})
	}
	return &Result{Outcome: OK, Msg: fmt.Sprintf("purged %d", n)}
}

// setTimer arms a timer whose command is this package's own and whose id
// is short (names are bounded), so SetTimer cannot refuse it.
func (m *Machine) setTimer(fx *engine.Effects, id string, at int64, cmd engine.Command) {
	if err := fx.SetTimer(id, at, cmd); err != nil {
		panic(err)
	}
}

func addSat(a, b int64) int64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxInt64
}
