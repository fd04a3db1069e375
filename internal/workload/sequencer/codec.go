package sequencer

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/wire"
)

// Command encoding, version 1: a tag byte, then the fields in order. Each
// type lists its fields once (code, over a wire.Coder), for both
// directions, so encoder and decoder cannot drift apart; wire's
// canonical-form rule makes bytes that decode re-encode to themselves
// (one logged record, one command). Tags are logged: never reuse or
// renumber.
const (
	tagPublish = 1 + iota
	tagPublishBatch
	tagLease
	tagComplete
	tagExtend
	tagRelease
	tagCommit
	tagDeleteGroup
	tagLeaseExpired
	tagPurgeMessages
	tagCompleteBatch
	tagReleaseSeqs // a Release with Seqs
	tagLeaseBytes  // a Lease with MaxBytes
	tagPublishHeld // a Publish with MaxHeldBytes
	tagPublishBatchHeld
)

// Client commands. Durations are in ns. The API fills in MsgID (a random
// one when the client gives none, so every publish is idempotent on
// retry) and RetentionNs from its flag, so both are logged and replay
// does what the live run did.
type (
	// Publish adds one message to Group. Seq 0: the server assigns the
	// next; Seq > 0: the client's, and a gap before it holds it.
	Publish struct {
		Group, MsgID string
		Seq          uint64
		Payload      []byte
		RetentionNs  int64 // 0: DefaultRetentionNs
		// MaxHeldBytes bounds what the partition's unreleased messages
		// cost (outCost each): a publish past it is refused. The API
		// fills it in so that it is logged and replay refuses what the
		// live run refused; 0 (records written before it): no bound.
		// Coded under tagPublishHeld; a batch's messages' are not coded.
		MaxHeldBytes int64
	}
	// PublishBatch publishes up to MaxBatch messages of one group, all
	// or nothing, in one log record.
	PublishBatch struct {
		Msgs         []Publish
		MaxHeldBytes int64 // as Publish's, for the whole batch
	}
	// Lease takes up to Max leasable messages, lowest seq first, and
	// with MaxBytes > 0 no more than fit MaxBytes of payload (always at
	// least one): 1,000 messages of 1 MiB would be a 1 GB answer held in
	// memory. A lease logged before MaxBytes existed has 0: no bound.
	Lease struct {
		Group, Processor string
		Max              int32
		LeaseNs          int64
		MaxBytes         int64
	}
	// Complete marks a leased message processed.
	Complete struct {
		Group     string
		Seq       uint64
		Processor string
	}
	// CompleteBatch completes up to MaxLeaseBatch of Processor's leased
	// messages of Group in one command, each as Complete would.
	CompleteBatch struct {
		Group, Processor string
		Seqs             []uint64
	}
	// Extend extends every lease Processor holds in Group.
	Extend struct {
		Group, Processor string
		LeaseNs          int64
	}
	// Release gives back every lease Processor holds in Group, or with
	// Seqs only those of them (a lease whose answer never reached the
	// processor).
	Release struct {
		Group, Processor string
		Seqs             []uint64
	}
	Commit struct {
		Group, Consumer string
		Position        uint64
	}
	DeleteGroup struct{ Group string }
)

// Timer commands; Apply refuses them from anywhere but a timer.
type (
	LeaseExpired struct {
		Group string
		Seq   uint64
	}
	PurgeMessages struct{}
)

type timerCommand interface{ timerCommand() }

func (*LeaseExpired) timerCommand()  {}
func (*PurgeMessages) timerCommand() {}

func (x *Publish) code(c *wire.Coder) {
	c.Str(&x.Group, &x.MsgID)
	c.U64(&x.Seq)
	c.Bytes(&x.Payload)
	c.I64(&x.RetentionNs)
}
func (x *PublishBatch) code(c *wire.Coder) {
	n := c.Count(len(x.Msgs), 5) // an empty Publish takes 5 bytes
	if c.Reading() {
		x.Msgs = make([]Publish, n)
	}
	for i := range x.Msgs {
		x.Msgs[i].code(c)
	}
}
func (x *Lease) code(c *wire.Coder) { c.Str(&x.Group, &x.Processor); c.I32(&x.Max); c.I64(&x.LeaseNs) }

// publishHeld and publishBatchHeld code a publish with its limit under
// a tag of its own, as leaseBytes does a Lease's bound.
type (
	publishHeld      struct{ *Publish }
	publishBatchHeld struct{ *PublishBatch }
)

func (x publishHeld) code(c *wire.Coder) {
	x.Publish.code(c)
	codeHeld(c, &x.MaxHeldBytes)
}
func (x publishBatchHeld) code(c *wire.Coder) {
	x.PublishBatch.code(c)
	codeHeld(c, &x.MaxHeldBytes)
}

func codeHeld(c *wire.Coder, n *int64) {
	c.I64(n)
	if c.Reading() && *n <= 0 && c.R.Err == nil {
		c.R.Err = errors.New("a publish with a limit has no positive limit")
	}
}

// leaseBytes codes a Lease with MaxBytes under a tag of its own, so that
// leases logged before it decode as they were: positive, so that a
// decoded record re-encodes under the same tag.
type leaseBytes struct{ *Lease }

func (x leaseBytes) code(c *wire.Coder) {
	x.Lease.code(c)
	c.I64(&x.MaxBytes)
	if c.Reading() && x.MaxBytes <= 0 && c.R.Err == nil {
		c.R.Err = errors.New("a byte-bounded lease has no positive bound")
	}
}
func (x *Complete) code(c *wire.Coder) { c.Str(&x.Group); c.U64(&x.Seq); c.Str(&x.Processor) }
func (x *CompleteBatch) code(c *wire.Coder) {
	c.Str(&x.Group, &x.Processor)
	n := c.Count(len(x.Seqs), 1)
	if c.Reading() {
		x.Seqs = make([]uint64, n)
	}
	for i := range x.Seqs {
		c.U64(&x.Seqs[i])
	}
}
func (x *Extend) code(c *wire.Coder)  { c.Str(&x.Group, &x.Processor); c.I64(&x.LeaseNs) }
func (x *Release) code(c *wire.Coder) { c.Str(&x.Group, &x.Processor) }

// releaseSeqs codes a Release with Seqs: at least one, so that a decoded
// record re-encodes under the same tag.
type releaseSeqs struct{ *Release }

func (x releaseSeqs) code(c *wire.Coder) {
	x.Release.code(c)
	n := c.Count(len(x.Seqs), 1)
	if c.Reading() {
		if n == 0 && c.R.Err == nil {
			c.R.Err = errors.New("a release of listed seqs lists none")
		}
		x.Seqs = make([]uint64, n)
	}
	for i := range x.Seqs {
		c.U64(&x.Seqs[i])
	}
}
func (x *Commit) code(c *wire.Coder)        { c.Str(&x.Group, &x.Consumer); c.U64(&x.Position) }
func (x *DeleteGroup) code(c *wire.Coder)   { c.Str(&x.Group) }
func (x *LeaseExpired) code(c *wire.Coder)  { c.Str(&x.Group); c.U64(&x.Seq) }
func (x *PurgeMessages) code(c *wire.Coder) {}

type coded interface {
	engine.Command
	code(c *wire.Coder)
}

// encode is each AppendBinary: inlined there, its call of code is
// direct, and the writer stays on the stack.
func encode(b []byte, tag byte, x coded) ([]byte, error) {
	w := wire.Writer{B: append(b, tag)}
	x.code(&wire.Coder{W: &w})
	return w.B, nil
}

func (x *Publish) AppendBinary(b []byte) ([]byte, error) {
	if x.MaxHeldBytes > 0 {
		return encode(b, tagPublishHeld, publishHeld{x})
	}
	return encode(b, tagPublish, x)
}
func (x *PublishBatch) AppendBinary(b []byte) ([]byte, error) {
	if x.MaxHeldBytes > 0 {
		return encode(b, tagPublishBatchHeld, publishBatchHeld{x})
	}
	return encode(b, tagPublishBatch, x)
}
func (x *Lease) AppendBinary(b []byte) ([]byte, error) {
	if x.MaxBytes > 0 {
		return encode(b, tagLeaseBytes, leaseBytes{x})
	}
	return encode(b, tagLease, x)
}
func (x *Complete) AppendBinary(b []byte) ([]byte, error)      { return encode(b, tagComplete, x) }
func (x *CompleteBatch) AppendBinary(b []byte) ([]byte, error) { return encode(b, tagCompleteBatch, x) }
func (x *Extend) AppendBinary(b []byte) ([]byte, error)        { return encode(b, tagExtend, x) }
func (x *Release) AppendBinary(b []byte) ([]byte, error) {
	if len(x.Seqs) > 0 {
		return encode(b, tagReleaseSeqs, releaseSeqs{x})
	}
	return encode(b, tagRelease, x)
}
func (x *Commit) AppendBinary(b []byte) ([]byte, error)        { return encode(b, tagCommit, x) }
func (x *DeleteGroup) AppendBinary(b []byte) ([]byte, error)   { return encode(b, tagDeleteGroup, x) }
func (x *LeaseExpired) AppendBinary(b []byte) ([]byte, error)  { return encode(b, tagLeaseExpired, x) }
func (x *PurgeMessages) AppendBinary(b []byte) ([]byte, error) { return encode(b, tagPurgeMessages, x) }

func newCommand(tag byte) coded {
	switch tag {
	case tagPublish:
		return &Publish{}
	case tagPublishBatch:
		return &PublishBatch{}
	case tagLease:
		return &Lease{}
	case tagComplete:
		return &Complete{}
	case tagExtend:
		return &Extend{}
	case tagRelease:
		return &Release{}
	case tagCommit:
		return &Commit{}
	case tagDeleteGroup:
		return &DeleteGroup{}
	case tagLeaseExpired:
		return &LeaseExpired{}
	case tagPurgeMessages:
		return &PurgeMessages{}
	case tagCompleteBatch:
		return &CompleteBatch{}
	case tagReleaseSeqs:
		return releaseSeqs{&Release{}}
	case tagLeaseBytes:
		return leaseBytes{&Lease{}}
	case tagPublishHeld:
		return publishHeld{&Publish{}}
	case tagPublishBatchHeld:
		return publishBatchHeld{&PublishBatch{}}
	}
	return nil
}

// Decode implements engine.Machine.
func (m *Machine) Decode(data []byte) (engine.Command, error) { return Decode(data) }

// Decode needs no state. Trailing bytes are an error: a record that
// decodes from a prefix of itself is not what was written.
func Decode(data []byte) (engine.Command, error) {
	cmd, err := wire.DecodeCommand(wire.Reader{B: data}, newCommand, coded.code)
	if err != nil {
		return nil, fmt.Errorf("sequencer: %w", err)
	}
	switch c := cmd.(type) {
	case releaseSeqs:
		return c.Release, nil
	case leaseBytes:
		return c.Lease, nil
	case publishHeld:
		return c.Publish, nil
	case publishBatchHeld:
		return c.PublishBatch, nil
	}
	return cmd, nil
}

// Snapshot encoding, version 1: the groups by name, each with its
// settings, its consumers by name and its window slot by slot (a gap is
// one byte); then the purge queue in order. The id index, the pending
// heap, the processors' lease sets and the counts are derived and
// rebuilt on Restore, so the same state encodes to the same bytes
// whatever its history.
const snapshotVersion = 1

func (x *msg) code(c *wire.Coder) {
	st := uint8(x.State)
	c.U8(&st)
	if c.Reading() {
		// Only when decoding: a snapshot encodes a fork's slots off the
		// partition while the partition reads them (a write of the same
		// value is still a race).
		x.State = State(st)
	}
	if x.State == MsgGap {
		return
	}
	c.Str(&x.ID)
	c.Bytes(&x.Payload)
	c.I64(&x.Created, &x.Processing, &x.Processed, &x.Released, &x.RetentionNs)
	if x.State == MsgLeased {
		c.Str(&x.Processor)
		c.I64(&x.LeaseUntil)
	}
}

func (g *Group) code(c *wire.Coder) {
	c.Str(&g.Name)
	mode := uint8(g.Mode)
	c.U8(&mode)
	if c.Reading() {
		g.Mode = Mode(mode)
	}
	c.I64(&g.CreatedAt)
	c.U64(&g.base, &g.position)
}

// AppendSnapshot implements engine.Machine.
func (m *Machine) AppendSnapshot(dst []byte) []byte {
	names := slices.Sorted(maps.Keys(m.groups))
	w := wire.Writer{B: dst}
	c := &wire.Coder{W: &w}
	w.Uvarint(snapshotVersion)
	c.Count(len(names), 1)
	for _, n := range names {
		g := m.groups[n]
		g.code(c)
		cons := slices.Sorted(maps.Keys(g.consumers))
		c.Count(len(cons), 2)
		for _, name := range cons {
			pos := g.consumers[name]
			c.Str(&name)
			c.U64(&pos)
		}
		c.Count(int(g.end+1-g.base), 1)
		for seq := g.base; seq <= g.end; seq++ {
			g.at(seq).code(c)
		}
	}
	c.Count(m.purgeQ.Len(), 2)
	for e := range m.purgeQ.All() {
		c.Str(&e.Group)
		c.I64(&e.At)
	}
	return w.B
}

// Restore implements engine.Machine. It checks what Apply relies on, so
// a damaged snapshot is an error here, not a panic later.
func (m *Machine) Restore(data []byte) error {
	m.reset()
	if err := m.restore(data); err != nil {
		m.reset()
		return fmt.Errorf("sequencer: restoring snapshot: %w", err)
	}
	return nil
}

func (m *Machine) restore(data []byte) error {
	r := wire.Reader{B: data}
	c := &wire.Coder{R: &r}
	if v := r.Uvarint(); r.Err == nil && v != snapshotVersion {
		return fmt.Errorf("version %d, this build reads %d", v, snapshotVersion)
	}
	prev := ""
	for ng := c.Count(0, 5); ng > 0 && r.Err == nil; ng-- {
		g := newGroup("", 0)
		g.code(c)
		if r.Err != nil {
			break
		}
		switch {
		case g.Name == "" || len(g.Name) > MaxNameLen || (prev != "" && g.Name <= prev):
			return fmt.Errorf("group name %q empty, too long or out of order", g.Name)
		case g.Mode != ModeServer && g.Mode != ModeClient:
			return fmt.Errorf("group %q has mode %d", g.Name, g.Mode)
		case g.base == 0 || g.base > g.position+1 || g.position > math.MaxInt64:
			return fmt.Errorf("group %q: base %d, position %d", g.Name, g.base, g.position)
		}
		prev = g.Name
		m.groups[g.Name] = g
		lastCons := ""
		for nc := c.Count(0, 2); nc > 0 && r.Err == nil; nc-- {
			var name string
			var pos uint64
			c.Str(&name)
			c.U64(&pos)
			if r.Err == nil && (name == "" || len(name) > MaxIDLen || (lastCons != "" && name <= lastCons) || pos > g.position) {
				return fmt.Errorf("group %q: consumer %q at %d", g.Name, name, pos)
			}
			lastCons = name
			g.consumers[name] = pos
		}
		n := c.Count(0, 1)
		if r.Err != nil {
			break
		}
		if uint64(n) > math.MaxInt64-g.base || g.base+uint64(n) <= g.position {
			return fmt.Errorf("group %q: a window of %d from %d does not reach its position %d", g.Name, n, g.base, g.position)
		}
		g.c0, g.end = (g.base-1)>>chunkShift, g.base-1
		for i := range n {
			var x msg
			x.code(c)
			if r.Err != nil {
				break
			}
			if err := g.checkSlot(g.base+uint64(i), &x, i == n-1); err != nil {
				return err
			}
			g.counts[x.State]++
			switch x.State {
			case MsgReleased:
				g.out += outCost(&x)
			case MsgGap:
			default:
				g.held += outCost(&x)
			}
			g.appendSlot(x)
		}
		m.out += g.out
		m.held += g.held
	}
	for n := c.Count(0, 2); n > 0 && r.Err == nil; n-- {
		var e purgeEntry
		c.Str(&e.Group)
		c.I64(&e.At)
		m.purgeQ.Push(e)
	}
	if r.Err == nil && len(r.B) > 0 {
		return fmt.Errorf("%d bytes after the snapshot", len(r.B))
	}
	return r.Err
}

// checkSlot checks one restored slot against what Apply relies on and
// indexes it.
func (g *Group) checkSlot(seq uint64, x *msg, last bool) error {
	released := seq <= g.position
	switch {
	case x.State >= numStates:
		return fmt.Errorf("group %q: message %d in state %d", g.Name, seq, x.State)
	case released != (x.State == MsgReleased):
		return fmt.Errorf("group %q: message %d is %s at position %d", g.Name, seq, x.State, g.position)
	case x.State == MsgGap && (last || g.Mode == ModeServer):
		return fmt.Errorf("group %q: a gap at %d", g.Name, seq)
	}
	if x.State == MsgGap {
		return nil
	}
	if _, dup := g.ids[x.ID]; dup || x.ID == "" || len(x.ID) > MaxIDLen {
		return fmt.Errorf("group %q: message id %q empty, too long or twice", g.Name, x.ID)
	}
	if x.State == MsgLeased && (x.Processor == "" || len(x.Processor) > MaxIDLen) {
		return fmt.Errorf("group %q: message %d leased to %q", g.Name, seq, x.Processor)
	}
	g.ids[x.ID] = seq
	switch x.State {
	case MsgPending:
		g.pending.push(seq)
	case MsgLeased:
		g.addLease(x.Processor, seq)
	}
	return nil
}

// ForkSnapshot implements engine.SnapshotForker: it takes each group's
// chunks as they are (their slice headers, so later appends stay out of
// view) and moves the group's gen on, so the partition copies a chunk
// before it next writes into it; consumers are copied. The encoding runs
// later, off the partition.
func (m *Machine) ForkSnapshot() func(dst []byte) []byte {
	f := &Machine{opts: m.opts, groups: make(map[string]*Group, len(m.groups)),
		purgeQ: m.purgeQ.View()}
	for n, g := range m.groups {
		fg := &Group{Name: g.Name, Mode: g.Mode, CreatedAt: g.CreatedAt, base: g.base, position: g.position, end: g.end,
			c0: g.c0, chunks: make([]*chunk, len(g.chunks)), consumers: maps.Clone(g.consumers)}
		for i, c := range g.chunks {
			fg.chunks[i] = &chunk{slots: c.slots}
		}
		g.gen++
		f.groups[n] = fg
	}
	return f.AppendSnapshot
}
