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
	"slices"
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
	// DefaultMaxOutputBytes bounds the released messages a partition
	// keeps for their consumers or their retention (outCost each): a
	// group without consumers keeps its output for --seq-retention, 24 h,
	// which at the peer's 3,000 messages/s was hundreds of millions of
	// messages, tens of GB. Past it the oldest released go early, as
	// Kafka's retention.bytes deletes a topic's oldest segments.
	DefaultMaxOutputBytes = int64(256 << 20)
	// outOverhead is what a kept message costs besides its payload and
	// id: its slot and its id's entry in the group's index.
	outOverhead = 160
	// DefaultMaxHeldBytes bounds what a partition's unreleased messages
	// cost (outCost each; Publish.MaxHeldBytes): the window's 1,000,000
	// slots a group of 1 MiB payloads would be 1 TB.
	DefaultMaxHeldBytes = int64(256 << 20)
)

// Limits a partition enforces; zero fields take the defaults.
type Limits struct {
	MaxUnreleased int // per group, gaps included
	MaxGroups     int // per partition
	MaxConsumers  int // per group
	// MaxOutputBytes bounds the released messages kept per partition
	// (outCost each).
	MaxOutputBytes int64
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
	if l.MaxOutputBytes <= 0 {
		l.MaxOutputBytes = DefaultMaxOutputBytes
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
	traces    map[uint64]engine.TraceContext // see trace.go
	// out: what its released messages kept cost (outCost); held: what
	// its unreleased messages cost.
	out, held int64
}

// outCost is what a released message kept costs against
// Limits.MaxOutputBytes.
func outCost(x *msg) int64 { return int64(len(x.Payload)+len(x.ID)) + outOverhead }

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
	return append([]any{ReadOutput{}, GroupInfo{}, ListGroups{}, &Result{}, &Output{}, &Info{}, []*Info(nil), Ready{}, Released{},
		GroupLags{}, &LagReport{}}, opsWireTypes()...)
}

// Machine is the sequencer state of one partition.
type Machine struct {
	opts   Options
	groups map[string]*Group
	// purgeQ: released runs in release order; see purge.
	purgeQ retain.Queue[purgeEntry]
	// out: what the groups' released messages kept cost
	// (Limits.MaxOutputBytes); held: what their unreleased messages cost
	// (Publish.MaxHeldBytes).
	out, held int64
	inBatch   bool // holds back Ready notes while a batch applies
	// trace is the input's trace while it applies (trace.go).
	trace engine.TraceContext
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
	m.out, m.held = 0, 0
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
		m.trace = in.Trace
		res = m.apply(in.Cmd, in.TimeNs, fx)
		m.trace = engine.TraceContext{}
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
