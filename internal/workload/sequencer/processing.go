package sequencer

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/surge-run/surge/internal/engine"
)

func leaseTimerID(group string, seq uint64) string {
	return "lease/" + group + "/" + strconv.FormatUint(seq, 10)
}

func (m *Machine) lease(c *Lease, now int64, fx *engine.Effects) *Result {
	g, r := m.group(c.Group)
	if r != nil {
		return r
	}
	if c.Processor == "" || len(c.Processor) > MaxIDLen || c.Max <= 0 || c.Max > MaxLeaseBatch || c.LeaseNs <= 0 {
		return fail(Invalid, "sequencer: a lease needs a processor id of 1 to %d bytes, 1 to %d messages and a positive duration", MaxIDLen, MaxLeaseBatch)
	}
	until := addSat(now, c.LeaseNs)
	var out []Message
	var bytes int64
	for len(out) < int(c.Max) && len(g.pending) > 0 {
		if n := int64(len(g.at(g.pending[0]).Payload)); c.MaxBytes > 0 && len(out) > 0 && bytes+n > c.MaxBytes {
			break
		}
		seq := g.pending.pop()
		x := g.mut(seq)
		if x == nil || x.State != MsgPending {
			panic(fmt.Sprintf("sequencer: seq %d of %q in the pending heap but %v", seq, g.Name, x))
		}
		g.move(x, MsgLeased)
		x.Processor, x.Processing, x.LeaseUntil = c.Processor, now, until
		g.addLease(c.Processor, seq)
		m.setTimer(fx, leaseTimerID(g.Name, seq), until, &LeaseExpired{Group: g.Name, Seq: seq})
		out = append(out, g.message(seq, x))
		bytes += int64(len(x.Payload))
	}
	if len(out) == 0 {
		return &Result{Outcome: Same, Position: g.position}
	}
	return &Result{Outcome: OK, Messages: out, Position: g.position}
}

func (g *Group) move(x *msg, to State) {
	g.counts[x.State]--
	g.counts[to]++
	x.State = to
}

func (g *Group) addLease(proc string, seq uint64) {
	s := g.leases[proc]
	if s == nil {
		s = map[uint64]struct{}{}
		g.leases[proc] = s
	}
	s[seq] = struct{}{}
}

// endLease drops a LEASED message's lease (not its state).
func (g *Group) endLease(seq uint64, x *msg, fx *engine.Effects) {
	if s := g.leases[x.Processor]; s != nil {
		delete(s, seq)
		if len(s) == 0 {
			delete(g.leases, x.Processor)
		}
	}
	fx.CancelTimer(leaseTimerID(g.Name, seq))
	x.Processor, x.LeaseUntil = "", 0
}

// giveBack makes a LEASED message leasable again.
func (g *Group) giveBack(seq uint64, x *msg, fx *engine.Effects) {
	g.endLease(seq, x, fx)
	g.move(x, MsgPending)
	g.pending.push(seq)
}

func (m *Machine) complete(c *Complete, now int64, fx *engine.Effects) *Result {
	g, r := m.group(c.Group)
	if r != nil {
		return r
	}
	var res Result
	if !g.completeOne(c.Seq, c.Processor, now, fx, &res) {
		return &res
	}
	m.releaseRun(g, now, fx)
	res.Position = g.position
	return &res
}

// completeOne checks and applies the completion of one seq into res,
// without releasing: a batch releases once, after all of its seqs. It
// reports whether the message changed state.
func (g *Group) completeOne(seq uint64, proc string, now int64, fx *engine.Effects, res *Result) bool {
	*res = Result{Outcome: Same, Position: g.position}
	if seq == 0 {
		*res = Result{Outcome: Invalid, Msg: "sequencer: seq must be positive"}
		return false
	}
	if seq < g.base {
		// Released and purged since: it was processed.
		return false
	}
	x := g.at(seq)
	if x == nil || x.State == MsgGap {
		*res = *fail(NotFound, "sequencer: no message %d in group %q", seq, g.Name)
		return false
	}
	switch {
	case x.State == MsgProcessed || x.State == MsgReleased:
		return false
	case x.State != MsgLeased || x.Processor != proc:
		*res = *fail(Conflict, "sequencer: message %d of group %q is %s, not leased to %q", seq, g.Name, x.State, proc)
		return false
	}
	x = g.mut(seq)
	g.endLease(seq, x, fx)
	g.move(x, MsgProcessed)
	x.Processed = now
	res.Outcome = OK
	return true
}

// completeBatch completes each seq as Complete would, in order, with one
// result per seq in Each (a seq repeated in the batch is Same the second
// time), then releases the contiguous run once: one Released note and
// one log record for a whole lease's worth, where Complete costs a
// command, a record and a note per message. Unlike PublishBatch it is
// not all or nothing: a processor whose lease on one message ran out
// must still get the others done. The command is logged if any seq
// changed; if none did, its outcome is the first refusal's (or Same).
func (m *Machine) completeBatch(c *CompleteBatch, now int64, fx *engine.Effects) *Result {
	g, r := m.group(c.Group)
	if r != nil {
		return r
	}
	if len(c.Seqs) == 0 || len(c.Seqs) > MaxLeaseBatch {
		return fail(Invalid, "sequencer: a completion batch holds 1 to %d seqs", MaxLeaseBatch)
	}
	res := &Result{Outcome: Same, Each: make([]*Result, len(c.Seqs))}
	slab := make([]Result, len(c.Seqs)) // one allocation, not one per seq
	var refusal *Result
	for i, seq := range c.Seqs {
		e := &slab[i]
		res.Each[i] = e
		if g.completeOne(seq, c.Processor, now, fx, e) {
			res.Outcome = OK
		} else if refusal == nil && e.Outcome != Same {
			refusal = e
		}
	}
	if res.Outcome == OK {
		m.releaseRun(g, now, fx)
	} else if refusal != nil {
		res.Outcome, res.Msg = refusal.Outcome, refusal.Msg
	}
	res.Position = g.position
	for _, e := range res.Each {
		if e.Outcome == OK || e.Outcome == Same {
			e.Position = g.position
		}
	}
	return res
}

// releaseRun releases the contiguous run of processed messages after the
// released position, in this Apply: order per group is one partition's,
// so no separate sequencer (the peer's leader) is needed.
func (m *Machine) releaseRun(g *Group, now int64, fx *engine.Effects) {
	from := g.position
	var lastRet int64 = -1
	for {
		x := g.at(g.position + 1)
		if x == nil || x.State != MsgProcessed {
			break
		}
		x = g.mut(g.position + 1)
		g.move(x, MsgReleased)
		x.Released = now
		g.out += outCost(x)
		m.out += outCost(x)
		g.held -= outCost(x)
		m.held -= outCost(x)
		g.position++
		m.traceRelease(g, g.position, fx)
		// One purge entry per run and retention, not per message: a
		// completion that releases a thousand costs one.
		if x.RetentionNs != lastRet {
			lastRet = x.RetentionNs
			m.queuePurge(g.Name, addSat(now, x.RetentionNs), fx)
		}
	}
	if g.position != from {
		fx.Notify(Released{Group: g.Name, Position: g.position})
		m.trimOutput()
	}
}

func (m *Machine) extend(c *Extend, now int64, fx *engine.Effects) *Result {
	g, r := m.group(c.Group)
	if r != nil {
		return r
	}
	if c.LeaseNs <= 0 {
		return fail(Invalid, "sequencer: an extension needs a positive lease duration")
	}
	seqs := g.leasedBy(c.Processor)
	until := addSat(now, c.LeaseNs)
	var out []Message
	for _, seq := range seqs {
		x := g.at(seq)
		if until > x.LeaseUntil {
			x = g.mut(seq)
			x.LeaseUntil = until
			m.setTimer(fx, leaseTimerID(g.Name, seq), until, &LeaseExpired{Group: g.Name, Seq: seq})
			out = append(out, g.message(seq, x))
		}
	}
	if len(out) == 0 {
		return &Result{Outcome: Same, Position: g.position}
	}
	return &Result{Outcome: OK, Messages: out, Position: g.position}
}

// leasedBy lists a processor's leased seqs in order: timers and replies
// must not follow the map's order.
func (g *Group) leasedBy(proc string) []uint64 {
	s := g.leases[proc]
	seqs := make([]uint64, 0, len(s))
	for seq := range s {
		seqs = append(seqs, seq)
	}
	slices.Sort(seqs)
	return seqs
}

// release gives a processor's leases in the group back at once: one that
// stops cleanly says so, and nobody waits for its leases to run out.
func (m *Machine) release(c *Release, fx *engine.Effects) *Result {
	g, r := m.group(c.Group)
	if r != nil {
		return r
	}
	seqs := g.leasedBy(c.Processor)
	if c.Seqs != nil {
		seqs = slices.DeleteFunc(seqs, func(s uint64) bool { return !slices.Contains(c.Seqs, s) })
	}
	if len(seqs) == 0 {
		return &Result{Outcome: Same, Position: g.position}
	}
	for _, seq := range seqs {
		g.giveBack(seq, g.mut(seq), fx)
	}
	m.notifyReady(g, fx)
	return &Result{Outcome: OK, Position: g.position}
}

func (m *Machine) leaseExpired(c *LeaseExpired, now int64, fx *engine.Effects) *Result {
	g := m.groups[c.Group]
	var x *msg
	if g != nil {
		x = g.at(c.Seq)
	}
	if x == nil || x.State != MsgLeased || x.LeaseUntil > now {
		return fail(Same, "sequencer: message %d of %q holds no expired lease", c.Seq, c.Group)
	}
	g.giveBack(c.Seq, g.mut(c.Seq), fx)
	m.notifyReady(g, fx)
	return &Result{Outcome: OK, Position: g.position}
}
