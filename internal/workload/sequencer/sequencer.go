// Package sequencer is the fourth workload: messages of a group are
// processed in parallel by leasing processors and released to the
// group's output in sequence order, a gap holding everything after it
// (see docs/API.md). All of its rules are in this file;
// the API (HTTP, gRPC, the benchmark routes) is built on top of it.
//
// A group and everything about it (its messages, their leases, the
// released output and its consumers' committed positions) live in the
// group's partition, key g/<name>. Order is a group's business only, so
// releasing in order needs nothing from another partition and is one
// Apply, and many groups spread over all partitions: adding groups adds
// throughput, while one hot group gets one partition's worth. Every
// command names its group, so it is routed without a lookup.
//
// A message's life:
//
//	(gap) → PENDING         publish (server seq: the next; client seq: any
//	                        free slot after the released position)
//	PENDING → LEASED        lease (lowest seqs first)
//	LEASED → PENDING        lease expired, or released by its processor
//	LEASED → PROCESSED      complete by the processor holding the lease
//	PROCESSED → RELEASED    once every seq before it is released: the
//	                        contiguous run after the released position
//	                        goes out in the Apply that completes its head
//	RELEASED → (purged)     every consumer has committed past it, or its
//	                        retention since release has run out
//
// Time is the input's stamp only. Only a command that changes state is
// logged: every rejection is declared Unchanged.
//
// For the API: every command goes to GroupKey(group); ListGroups goes to
// every partition, merged. Notes: Ready (processors waiting on the group
// may lease), Released (consumers waiting on the group may read).
package sequencer

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"

	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/retain"
)

// WorkloadID is written into every log record of this workload.
const WorkloadID uint8 = 4

// GroupKey routes every command of a group.
func GroupKey(name string) string { return "g/" + name }

// Limits. A limit on everything keeps a partition's memory bounded; the
// ones a deployment may want to change are in Limits.
const (
	MaxNameLen         = 256
	MaxIDLen           = 128
	MaxPayloadBytes    = 1 << 20
	MaxBatch           = 1000
	MaxLeaseBatch      = 1000
	DefaultRetentionNs = int64(24 * 3600e9)
	// DefaultMaxUnreleased bounds a group's window from the released
	// position to its highest seq. Gaps count: a slot costs memory
	// whether a message is in it or not, and a client seq far ahead
	// would otherwise make the partition allocate the distance.
	DefaultMaxUnreleased = 1_000_000
	DefaultMaxGroups     = 10_000
	DefaultMaxConsumers  = 100
	maxReadLimit         = 1000
)

// Limits a partition enforces; zero fields take the defaults.
type Limits struct {
	MaxUnreleased int // per group, gaps included
	MaxGroups     int // per partition
	MaxConsumers  int // per group
}

func (l Limits) withDefaults() Limits {
	if l.MaxUnreleased <= 0 {
		l.MaxUnreleased = DefaultMaxUnreleased
	}
	if l.MaxGroups <= 0 {
		l.MaxGroups = DefaultMaxGroups
	}
	if l.MaxConsumers <= 0 {
		l.MaxConsumers = DefaultMaxConsumers
	}
	return l
}

// Mode says who assigns a group's sequence numbers; a group's first
// publish fixes it. Mixing would make "the next seq" ambiguous: a server
// seq could take a slot a client meant to fill.
type Mode uint8

const (
	ModeNone   Mode = iota // no publish yet
	ModeServer             // Seq 0: the server assigns the next
	ModeClient             // Seq > 0: the client's, gaps held
	numModes
)

func (m Mode) String() string {
	return [...]string{"none", "server", "client", "Mode?"}[min(int(m), 3)]
}

// State of a message slot.
type State uint8

const (
	MsgGap State = iota // a client seq not published yet
	MsgPending
	MsgLeased
	MsgProcessed
	MsgReleased
	numStates
)

func (s State) String() string {
	if s < numStates {
		return [...]string{"GAP", "PENDING", "LEASED", "PROCESSED", "RELEASED"}[s]
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// msg is one slot of a group's window, stored by value in chunks of
// 1,024 slots indexed by seq, so a million messages are a thousand
// allocations the collector scans, not a million objects. The timestamps are input times:
// Processing is the last lease's, Released when it went out in order.
type msg struct {
	ID          string
	Payload     []byte
	Processor   string // while LEASED
	State       State
	Created     int64
	Processing  int64
	Processed   int64
	Released    int64
	LeaseUntil  int64
	RetentionNs int64
}

// The window is chunked so that a snapshot fork copies a chunk's slice
// header, not its slots: seq s lives in slot (s-1) mod 1,024 of the
// chunk numbered (s-1)/1,024. After a fork (gen moves on) a chunk is
// shared with it and copied before its first write; appending past a
// shared chunk's length writes where no fork reads. 112 B × 1024 slots:
// a written chunk costs a 112 KB copy once per snapshot.
//
// chunkShift is a variable only so that tests can make chunks of a few
// slots and cross chunk boundaries often.
var chunkShift uint = 10

type chunk struct {
	slots []msg // grows by append while the chunk is the window's tail
	gen   uint64
}

// Group is one sequence: its window of messages, its consumers.
type Group struct {
	Name      string
	Mode      Mode
	CreatedAt int64
	// base is the lowest seq kept; everything below it was released and
	// purged. position is the released position (the last seq
	// released); end the highest seq in the window (position if none
	// is unreleased). base ≤ position+1 ≤ end+1 always.
	base, position, end uint64
	// chunks[0] is chunk number c0 = (base-1)>>chunkShift.
	chunks []*chunk
	c0     uint64
	gen    uint64            // moves on at each fork
	ids    map[string]uint64 // message id → seq, while kept
	// consumers: name → committed position.
	consumers map[string]uint64
	pending   seqHeap                        // PENDING seqs, for Lease
	leases    map[string]map[uint64]struct{} // processor → its LEASED seqs
	counts    [numStates]int
}

func newGroup(name string, now int64) *Group {
	return &Group{Name: name, CreatedAt: now, base: 1, ids: map[string]uint64{},
		consumers: map[string]uint64{}, leases: map[string]map[uint64]struct{}{}}
}

// last is the highest seq in the window (the released position if the
// window holds nothing unreleased).
func (g *Group) last() uint64 { return g.end }

// at reads a slot; nil outside the window. Writes go through mut.
func (g *Group) at(seq uint64) *msg {
	if seq < g.base || seq > g.end {
		return nil
	}
	return &g.chunks[(seq-1)>>chunkShift-g.c0].slots[(seq-1)&(1<<chunkShift-1)]
}

// mut is at for writing: a chunk a fork may still read is copied first.
func (g *Group) mut(seq uint64) *msg {
	if seq < g.base || seq > g.end {
		panic(fmt.Sprintf("sequencer: write to seq %d outside %d…%d of %q", seq, g.base, g.end, g.Name))
	}
	k := (seq-1)>>chunkShift - g.c0
	c := g.chunks[k]
	if c.gen != g.gen {
		c = &chunk{slots: slices.Clone(c.slots), gen: g.gen}
		g.chunks[k] = c
	}
	return &c.slots[(seq-1)&(1<<chunkShift-1)]
}

// appendSlot puts x at seq end+1. A chunk's first slot may be past its
// start (a restored window begins at base): the slots before are empty.
func (g *Group) appendSlot(x msg) {
	seq := g.end + 1
	k := (seq-1)>>chunkShift - g.c0
	for uint64(len(g.chunks)) <= k {
		g.chunks = append(g.chunks, &chunk{gen: g.gen})
	}
	c := g.chunks[k]
	i := int((seq - 1) & (1<<chunkShift - 1))
	if i >= cap(c.slots) && i >= 64 {
		// Past a small group's size, go straight to a whole chunk:
		// append's growth would overshoot it (and copy more often).
		full := make([]msg, len(c.slots), 1<<chunkShift)
		copy(full, c.slots)
		c.slots = full
	}
	for len(c.slots) < i {
		c.slots = append(c.slots, msg{})
	}
	c.slots = append(c.slots, x)
	g.end = seq
}

// Options configure a partition's machine.
type Options struct{ Limits Limits }

// Workload creates the sequencer machines of an engine.
type Workload struct{ Limits Limits }

func (w *Workload) ID() uint8                     { return WorkloadID }
func (w *Workload) Name() string                  { return "sequencer" }
func (w *Workload) NewMachine(int) engine.Machine { return NewMachine(Options{Limits: w.Limits}) }

// WireTypes lists the query, reply and notification types that cross
// between nodes in cluster mode (engine.WireTypes).
func (w *Workload) WireTypes() []any {
	return []any{ReadOutput{}, GroupInfo{}, ListGroups{}, &Result{}, &Output{}, &Info{}, []*Info(nil), Ready{}, Released{}}
}

// Machine is the sequencer state of one partition.
type Machine struct {
	opts   Options
	groups map[string]*Group
	// purgeQ: released runs in release order; see purge.
	purgeQ  retain.Queue[purgeEntry]
	inBatch bool // holds back Ready notes while a batch applies
}

type purgeEntry struct {
	Group string
	At    int64
}

func (e purgeEntry) Due() int64 { return e.At }

// NewMachine returns an empty partition.
func NewMachine(o Options) *Machine {
	o.Limits = o.Limits.withDefaults()
	m := &Machine{opts: o}
	m.reset()
	return m
}

func (m *Machine) reset() {
	m.groups = map[string]*Group{}
	m.purgeQ = retain.Queue[purgeEntry]{}
}

// Outcome of a command, for the API layer to map to a status code.
type Outcome uint8

const (
	OK        Outcome = iota // applied
	Created                  // a new message
	Same                     // already so (idempotent repeat); nothing changed
	NotFound                 // unknown group or message
	Invalid                  // bad input
	Conflict                 // wrong state
	Exhausted                // a limit
)

var outcomeNames = [...]string{"OK", "Created", "Same", "NotFound", "Invalid", "Conflict", "Exhausted"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// Message is a copy of one message for replies and queries.
type Message struct {
	Group      string
	Seq        uint64
	ID         string
	Payload    []byte
	State      State
	Processor  string
	Created    int64
	Processing int64
	Processed  int64
	Released   int64
	LeaseUntil int64
}

// Result is the reply of every command. Seq is a publish's seq; Each
// holds a batch's results in order; Messages a lease's.
type Result struct {
	Outcome  Outcome
	Msg      string
	Seq      uint64
	Position uint64 // the group's released position after the command
	Messages []Message
	Each     []*Result
}

// Notes for observers (Effects.Notify), released once durable.
type (
	// Ready: the group has N leasable messages; wake its processors.
	Ready struct {
		Group string
		N     int
	}
	// Released: the group's released position is now Position; wake its
	// consumers.
	Released struct {
		Group    string
		Position uint64
	}
)

// Apply implements engine.Machine.
func (m *Machine) Apply(in *engine.Input, fx *engine.Effects) {
	var res *Result
	if _, ok := in.Cmd.(timerCommand); ok && in.Kind != engine.FromTimer {
		// A forged expiry from a client could take a lease from its holder.
		res = fail(Invalid, "sequencer: %T is applied by its timer only", in.Cmd)
	} else {
		res = m.apply(in.Cmd, in.TimeNs, fx)
	}
	if res.Outcome != OK && res.Outcome != Created {
		fx.Unchanged()
	}
	fx.Reply(res)
}

func (m *Machine) apply(cmd engine.Command, now int64, fx *engine.Effects) *Result {
	switch c := cmd.(type) {
	case *Publish:
		return m.publish(c, now, fx)
	case *PublishBatch:
		return m.publishBatch(c, now, fx)
	case *Lease:
		return m.lease(c, now, fx)
	case *Complete:
		return m.complete(c, now, fx)
	case *CompleteBatch:
		return m.completeBatch(c, now, fx)
	case *Extend:
		return m.extend(c, now, fx)
	case *Release:
		return m.release(c, fx)
	case *Commit:
		return m.commit(c, now)
	case *DeleteGroup:
		return m.deleteGroup(c, fx)
	case *LeaseExpired:
		return m.leaseExpired(c, now, fx)
	case *PurgeMessages:
		return m.purge(now, fx)
	}
	return fail(Invalid, "sequencer: unknown command %T", cmd)
}

func fail(o Outcome, format string, a ...any) *Result {
	return &Result{Outcome: o, Msg: fmt.Sprintf(format, a...)}
}

func badName(what, s string) *Result {
	if s == "" || len(s) > MaxNameLen {
		return fail(Invalid, "sequencer: %s must be 1 to %d bytes", what, MaxNameLen)
	}
	return nil
}

// group finds a named group, or says why not.
func (m *Machine) group(name string) (*Group, *Result) {
	if r := badName("group name", name); r != nil {
		return nil, r
	}
	g := m.groups[name]
	if g == nil {
		return nil, fail(NotFound, "sequencer: no group %q", name)
	}
	return g, nil
}

// --- publish ---

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
	g.ids[c.MsgID] = seq
	g.counts[MsgGap]--
	g.counts[MsgPending]++
	g.pending.push(seq)
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
	res := &Result{Outcome: Same, Each: make([]*Result, len(c.Msgs))}
	mode := ModeNone
	if g != nil {
		mode = g.Mode
	}
	taken := map[uint64]string{}
	ids := map[string]int{}
	dupOf := make([]int, len(c.Msgs))
	adds, top := 0, uint64(0)
	for i := range c.Msgs {
		p := &c.Msgs[i]
		r := m.checkPublish(g, p, name, taken, adds)
		if r == nil {
			if k, dup := ids[p.MsgID]; dup {
				dupOf[i] = k + 1
				continue
			}
			if mode == ModeNone {
				mode = modeOf(p.Seq)
			} else if mode != modeOf(p.Seq) {
				r = fail(Invalid, "sequencer: group %q takes %s sequence numbers until it is deleted", name, mode)
			}
		}
		if r != nil && r.Outcome != Same {
			return fail(r.Outcome, "%s (message %d of the batch; nothing was published)", r.Msg, i)
		}
		res.Each[i] = r
		if r != nil {
			continue
		}
		ids[p.MsgID] = i
		if p.Seq > 0 {
			taken[p.Seq] = p.MsgID
			top = max(top, p.Seq)
		}
		adds++
	}
	if g == nil && adds > 0 {
		if r := m.newGroupAllowed(name); r != nil {
			return r
		}
		if mode == ModeServer {
			top = uint64(adds)
		}
		if top > uint64(m.opts.Limits.MaxUnreleased) {
			return fail(Exhausted, "sequencer: the batch reaches seq %d, more than %d past the released position 0 (nothing was published)",
				top, m.opts.Limits.MaxUnreleased)
		}
		g = newGroup(name, now)
		m.groups[name] = g
	}
	m.inBatch = true // one Ready note for the batch, not one per message
	for i := range c.Msgs {
		switch {
		case dupOf[i] > 0:
			// An id repeated within the batch: its first use's seq.
			res.Each[i] = &Result{Outcome: Same, Seq: res.Each[dupOf[i]-1].Seq}
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

// --- processing ---

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
		g.position++
		// One purge entry per run and retention, not per message: a
		// completion that releases a thousand costs one.
		if x.RetentionNs != lastRet {
			lastRet = x.RetentionNs
			m.queuePurge(g.Name, addSat(now, x.RetentionNs), fx)
		}
	}
	if g.position != from {
		fx.Notify(Released{Group: g.Name, Position: g.position})
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

// --- consumers ---

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
	return &Result{Outcome: OK}
}

// --- retention ---

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
		delete(g.ids, x.ID)
		g.counts[MsgReleased]--
		if c := g.chunks[0]; c.gen == g.gen {
			*x = msg{} // let the payload go now, unless a fork shares it
		}
		g.base++
		n++
		// A chunk goes once its last slot is purged.
		if (g.base-1)>>chunkShift > g.c0 && len(g.chunks) > 0 {
			g.chunks[0] = nil
			g.chunks = g.chunks[1:]
			g.c0++
		}
	}
	if cap(g.chunks) > 2*len(g.chunks)+16 {
		g.chunks = slices.Clone(g.chunks)
	}
	return n
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

// --- the pending heap ---

// seqHeap is a min-heap of PENDING seqs: a lease takes the lowest first,
// so the released position moves as early as it can. Seqs are unique
// and a message leaves only by being leased, so no removal is needed.
// Publishing in server order pushes increasing seqs, which costs O(1).
type seqHeap []uint64

func (h *seqHeap) push(s uint64) {
	*h = append(*h, s)
	x := *h
	for i := len(x) - 1; i > 0; {
		p := (i - 1) / 2
		if x[p] <= x[i] {
			break
		}
		x[p], x[i] = x[i], x[p]
		i = p
	}
}

func (h *seqHeap) pop() uint64 {
	x := *h
	top := x[0]
	last := len(x) - 1
	x[0] = x[last]
	x = x[:last]
	for i := 0; ; {
		l, small := 2*i+1, i
		if l < len(x) && x[l] < x[small] {
			small = l
		}
		if r := l + 1; r < len(x) && x[r] < x[small] {
			small = r
		}
		if small == i {
			break
		}
		x[i], x[small] = x[small], x[i]
		i = small
	}
	*h = x
	return top
}

// --- queries ---

// Queries (Machine.Query); each answer is a copy.
type (
	// ReadOutput → *Output: released messages with seq > After, at most
	// Limit (0: 100, at most 1000), and with MaxBytes > 0 no more than
	// that many bytes of ids and payloads but at least one message.
	ReadOutput struct {
		Group    string
		After    uint64
		Limit    int
		MaxBytes int
	}
	GroupInfo  struct{ Group string } // → *Info, nil if no such group
	ListGroups struct{}               // → []*Info by name
)

// Output answers ReadOutput. FirstKept is the lowest seq still kept
// (Position+1 if none is): a reader asking for purged positions gets the
// output from FirstKept on and can tell it missed some.
type Output struct {
	Found     bool
	Messages  []Message
	Position  uint64
	FirstKept uint64
}

// Info describes a group. Missing is the lowest seq a gap holds the
// output at (0: no gap).
type Info struct {
	Name                                 string
	Mode                                 Mode
	CreatedAt                            int64
	Position, FirstKept, Last, Missing   uint64
	Pending, Leased, Processed, Released int // Released: kept, not purged
	Consumers                            []Consumer
}

// Consumer is a consumer's committed position.
type Consumer struct {
	Name     string
	Position uint64
}

func (m *Machine) Query(q any) any {
	switch q := q.(type) {
	case ReadOutput:
		return m.readOutput(q)
	case GroupInfo:
		if g := m.groups[q.Group]; g != nil {
			return g.info()
		}
		return (*Info)(nil)
	case ListGroups:
		names := make([]string, 0, len(m.groups))
		for n := range m.groups {
			names = append(names, n)
		}
		sort.Strings(names)
		out := make([]*Info, len(names))
		for i, n := range names {
			out[i] = m.groups[n].info()
		}
		return out
	}
	return nil
}

func (m *Machine) readOutput(q ReadOutput) *Output {
	g := m.groups[q.Group]
	if g == nil {
		return &Output{}
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, maxReadLimit)
	out := &Output{Found: true, Position: g.position, FirstKept: g.base}
	size := 0
	for seq := max(q.After+1, g.base); seq <= g.position && len(out.Messages) < limit; seq++ {
		x := g.at(seq)
		size += len(x.ID) + len(x.Payload)
		if q.MaxBytes > 0 && size > q.MaxBytes && len(out.Messages) > 0 {
			break
		}
		out.Messages = append(out.Messages, g.message(seq, x))
	}
	return out
}

func (g *Group) message(seq uint64, x *msg) Message {
	return Message{Group: g.Name, Seq: seq, ID: x.ID, Payload: x.Payload, State: x.State, Processor: x.Processor,
		Created: x.Created, Processing: x.Processing, Processed: x.Processed, Released: x.Released, LeaseUntil: x.LeaseUntil}
}

func (g *Group) info() *Info {
	in := &Info{Name: g.Name, Mode: g.Mode, CreatedAt: g.CreatedAt, Position: g.position, FirstKept: g.base, Last: g.last(),
		Pending: g.counts[MsgPending], Leased: g.counts[MsgLeased], Processed: g.counts[MsgProcessed], Released: g.counts[MsgReleased]}
	for seq := g.position + 1; g.counts[MsgGap] > 0 && seq <= g.last(); seq++ {
		if g.at(seq).State == MsgGap {
			in.Missing = seq
			break
		}
	}
	for name, p := range g.consumers {
		in.Consumers = append(in.Consumers, Consumer{Name: name, Position: p})
	}
	sort.Slice(in.Consumers, func(a, b int) bool { return in.Consumers[a].Name < in.Consumers[b].Name })
	return in
}
