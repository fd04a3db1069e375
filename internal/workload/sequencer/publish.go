package sequencer

import (
	"math"

	"github.com/surge-run/surge/internal/engine"
)

func modeOf(seq uint64) Mode {
	if seq == 0 {
		return ModeServer
	}
	return ModeClient
}

// checkPublish refuses a publish that may not be applied to g (nil may
// be a group not created yet). nil: it may; a Same result: it repeats a
// kept message's id. taken lists client seqs claimed earlier in the same
// batch; extra counts server seqs the batch assigns before this one.
func (m *Machine) checkPublish(g *Group, p *Publish, group string, taken map[uint64]string, extra int) *Result {
	switch {
	case p.Group != group:
		return fail(Invalid, "sequencer: a batch's messages must share one group")
	case p.MsgID == "" || len(p.MsgID) > MaxIDLen:
		return fail(Invalid, "sequencer: message id must be 1 to %d bytes", MaxIDLen)
	case len(p.Payload) > MaxPayloadBytes:
		return fail(Exhausted, "sequencer: payload of %d bytes is over %d", len(p.Payload), MaxPayloadBytes)
	case p.RetentionNs < 0:
		return fail(Invalid, "sequencer: retention must not be negative")
	case p.Seq > math.MaxInt64:
		// Positions travel through JSON and signed fields: keep them there.
		return fail(Invalid, "sequencer: seq %d is over %d", p.Seq, int64(math.MaxInt64))
	}
	if p.Seq > 0 && taken[p.Seq] != "" {
		return fail(Conflict, "sequencer: seq %d of group %q is taken by another message", p.Seq, group)
	}
	if g == nil {
		return nil
	}
	if seq, ok := g.ids[p.MsgID]; ok {
		return &Result{Outcome: Same, Seq: seq, Position: g.position}
	}
	if g.Mode != ModeNone && g.Mode != modeOf(p.Seq) {
		return fail(Invalid, "sequencer: group %q takes %s sequence numbers until it is deleted", g.Name, g.Mode)
	}
	seq := p.Seq
	if seq == 0 {
		seq = g.last() + 1 + uint64(extra)
	} else {
		if seq <= g.position {
			return fail(Conflict, "sequencer: seq %d is at or below the released position %d of group %q", seq, g.position, g.Name)
		}
		if x := g.at(seq); x != nil && x.State != MsgGap {
			return fail(Conflict, "sequencer: seq %d of group %q is taken by another message", seq, g.Name)
		}
	}
	if seq-g.position > uint64(m.opts.Limits.MaxUnreleased) {
		return fail(Exhausted, "sequencer: seq %d is more than %d past the released position %d of group %q",
			seq, m.opts.Limits.MaxUnreleased, g.position, g.Name)
	}
	return nil
}

// pubCost is what a published message will cost its partition: the
// outCost of the slot it will fill, so the two cannot drift apart.
func pubCost(p *Publish) int64 { return outCost(&msg{ID: p.MsgID, Payload: p.Payload}) }

// checkHeld refuses messages costing n more when the partition's
// unreleased messages would cost more than limit (0: none).
func (m *Machine) checkHeld(n, limit int64) *Result {
	if limit > 0 && m.held+n > limit {
		return fail(Exhausted, "sequencer: this partition's unreleased messages take %d bytes; %d more would pass its limit of %d, freed as messages are released",
			m.held, n, limit)
	}
	return nil
}

func (m *Machine) newGroupAllowed(name string) *Result {
	if len(m.groups) >= m.opts.Limits.MaxGroups {
		return fail(Exhausted, "sequencer: at most %d groups per partition; group %q not created", m.opts.Limits.MaxGroups, name)
	}
	return nil
}

func (m *Machine) publish(c *Publish, now int64, fx *engine.Effects) *Result {
	if r := badName("group name", c.Group); r != nil {
		return r
	}
	g := m.groups[c.Group]
	if r := m.checkPublish(g, c, c.Group, nil, 0); r != nil {
		return r
	}
	if r := m.checkHeld(pubCost(c), c.MaxHeldBytes); r != nil {
		return r
	}
	if g == nil {
		if r := m.newGroupAllowed(c.Group); r != nil {
			return r
		}
		// The empty group's window starts at seq 1: a client seq above
		// MaxUnreleased is refused before the group exists.
		if c.Seq > uint64(m.opts.Limits.MaxUnreleased) {
			return fail(Exhausted, "sequencer: seq %d is more than %d past the released position 0", c.Seq, m.opts.Limits.MaxUnreleased)
		}
		g = newGroup(c.Group, now)
		m.groups[c.Group] = g
	}
	seq := m.add(g, c, now)
	m.notifyReady(g, fx)
	return &Result{Outcome: Created, Seq: seq, Position: g.position}
}

// add puts a checked message into its slot, growing the window to it.
func (m *Machine) add(g *Group, c *Publish, now int64) uint64 {
	if g.Mode == ModeNone {
		g.Mode = modeOf(c.Seq)
	}
	seq := c.Seq
	if seq == 0 {
		seq = g.last() + 1
	}
	for g.end < seq {
		g.appendSlot(msg{})
		g.counts[MsgGap]++
	}
	ret := c.RetentionNs
	if ret == 0 {
		ret = DefaultRetentionNs
	}
	x := g.mut(seq)
	*x = msg{ID: c.MsgID, Payload: c.Payload, State: MsgPending, Created: now, RetentionNs: ret}
	g.held += outCost(x)
	m.held += outCost(x)
	g.ids[c.MsgID] = seq
	g.counts[MsgGap]--
	g.counts[MsgPending]++
	g.pending.push(seq)
	m.keepTrace(g, seq)
	return seq
}

func (m *Machine) notifyReady(g *Group, fx *engine.Effects) {
	if !m.inBatch && len(g.pending) > 0 {
		fx.Notify(Ready{Group: g.Name, N: len(g.pending)})
	}
}

// publishBatch is all or nothing, like jobs' SubmitBatch: every message
// is checked before any is added, so a refused batch changes nothing and
// the client can fix it and resend the whole. An id repeated within the
// batch gets the first one's seq.
func (m *Machine) publishBatch(c *PublishBatch, now int64, fx *engine.Effects) *Result {
	if len(c.Msgs) == 0 || len(c.Msgs) > MaxBatch {
		return fail(Invalid, "sequencer: a batch holds 1 to %d messages", MaxBatch)
	}
	name := c.Msgs[0].Group
	if r := badName("group name", name); r != nil {
		return r
	}
	g := m.groups[name]
	plan, r := m.checkBatch(g, c.Msgs, name)
	if r != nil {
		return r
	}
	cost := int64(0)
	for i := range c.Msgs {
		if plan.each[i] == nil && plan.dupOf[i] == 0 {
			cost += pubCost(&c.Msgs[i])
		}
	}
	if r := m.checkHeld(cost, c.MaxHeldBytes); r != nil {
		return fail(r.Outcome, "%s (nothing was published)", r.Msg)
	}
	if g == nil && plan.adds > 0 {
		if g, r = m.newBatchGroup(name, plan, now); r != nil {
			return r
		}
	}
	res := &Result{Outcome: Same, Each: plan.each}
	m.inBatch = true // one Ready note for the batch, not one per message
	for i := range c.Msgs {
		switch {
		case plan.dupOf[i] > 0:
			// An id repeated within the batch: its first use's seq.
			res.Each[i] = &Result{Outcome: Same, Seq: res.Each[plan.dupOf[i]-1].Seq}
		case res.Each[i] == nil:
			seq := m.add(g, &c.Msgs[i], now)
			res.Each[i] = &Result{Outcome: Created, Seq: seq}
			res.Outcome = Created
		}
	}
	m.inBatch = false
	if g != nil {
		res.Position = g.position
		for _, r := range res.Each {
			r.Position = g.position
		}
	}
	if res.Outcome == Created {
		m.notifyReady(g, fx)
	}
	return res
}

// batchPlan is what checking a batch found.
type batchPlan struct {
	each  []*Result // per message: nil to add it, Same for a kept id
	dupOf []int     // per message: k+1 if it repeats message k's id
	adds  int       // how many messages are added
	top   uint64    // the highest client seq added
	mode  Mode      // the group's mode once the batch is added
}

// checkBatch checks every message of a batch to group name (g: nil if it
// does not exist yet) before any is added; a Result refuses the whole
// batch, naming the message.
func (m *Machine) checkBatch(g *Group, msgs []Publish, name string) (*batchPlan, *Result) {
	plan := &batchPlan{each: make([]*Result, len(msgs)), dupOf: make([]int, len(msgs)), mode: ModeNone}
	if g != nil {
		plan.mode = g.Mode
	}
	taken := map[uint64]string{}
	ids := map[string]int{}
	for i := range msgs {
		p := &msgs[i]
		r := m.checkPublish(g, p, name, taken, plan.adds)
		if r == nil {
			if k, dup := ids[p.MsgID]; dup {
				plan.dupOf[i] = k + 1
				continue
			}
			if plan.mode == ModeNone {
				plan.mode = modeOf(p.Seq)
			} else if plan.mode != modeOf(p.Seq) {
				r = fail(Invalid, "sequencer: group %q takes %s sequence numbers until it is deleted", name, plan.mode)
			}
		}
		if r != nil && r.Outcome != Same {
			return nil, fail(r.Outcome, "%s (message %d of the batch; nothing was published)", r.Msg, i)
		}
		plan.each[i] = r
		if r != nil {
			continue
		}
		ids[p.MsgID] = i
		if p.Seq > 0 {
			taken[p.Seq] = p.MsgID
			plan.top = max(plan.top, p.Seq)
		}
		plan.adds++
	}
	return plan, nil
}

// newBatchGroup creates the group a checked batch publishes to first,
// unless the partition holds its limit of groups or the batch reaches
// past the new group's window.
func (m *Machine) newBatchGroup(name string, plan *batchPlan, now int64) (*Group, *Result) {
	if r := m.newGroupAllowed(name); r != nil {
		return nil, r
	}
	top := plan.top
	if plan.mode == ModeServer {
		top = uint64(plan.adds)
	}
	if top > uint64(m.opts.Limits.MaxUnreleased) {
		return nil, fail(Exhausted, "sequencer: the batch reaches seq %d, more than %d past the released position 0 (nothing was published)",
			top, m.opts.Limits.MaxUnreleased)
	}
	g := newGroup(name, now)
	m.groups[name] = g
	return g, nil
}
