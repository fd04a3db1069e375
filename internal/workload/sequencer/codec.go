package sequencer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/wire"
)

// Command encoding, version 1: a tag byte, then the fields in order. Each
// type lists its fields once (code), for both directions, so encoder and
// decoder cannot drift apart. Tags are logged: never reuse or renumber.
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
	}
	// PublishBatch publishes up to MaxBatch messages of one group, all
	// or nothing, in one log record.
	PublishBatch struct{ Msgs []Publish }
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

// coder writes (w set) or reads (r set) one field at a time. It is the
// jobs codec's: every varint in its shortest form, so bytes that decode
// re-encode to themselves (one logged record, one command).
type coder struct {
	w *wire.Writer
	r *wire.Reader
}

func (c *coder) str(p ...*string) {
	for _, s := range p {
		if c.w != nil {
			c.w.Str(*s)
		} else {
			*s = string(c.r.Next(c.length()))
		}
	}
}

// bytes copies on read: a payload outlives the buffer it came from and
// must not pin a whole log batch.
func (c *coder) bytes(p *[]byte) {
	if c.w != nil {
		c.w.Bytes(*p)
		return
	}
	b := c.r.Next(c.length())
	*p = nil
	if len(b) > 0 {
		*p = slices.Clone(b)
	}
}

var errNotCanonical = errors.New("sequencer: a number in a longer form than it is written in")

// uvarintLen and varintLen are the lengths of the shortest encodings,
// without encoding (an allocation per field read, otherwise).
func uvarintLen(x uint64) int {
	n := 1
	for ; x >= 0x80; x >>= 7 {
		n++
	}
	return n
}

func varintLen(x int64) int {
	ux := uint64(x) << 1
	if x < 0 {
		ux = ^ux
	}
	return uvarintLen(ux)
}

func (c *coder) length() int {
	if c.r.Err != nil {
		return 0
	}
	x, n := binary.Uvarint(c.r.B)
	switch {
	case n <= 0:
		c.r.Err = wire.ErrTruncated
		return 0
	case n != uvarintLen(x):
		c.r.Err = errNotCanonical
		return 0
	case x > uint64(len(c.r.B)-n):
		c.r.Err = wire.ErrTruncated
		return 0
	}
	c.r.B = c.r.B[n:]
	return int(x)
}

func (c *coder) i64(p ...*int64) {
	for _, v := range p {
		if c.w != nil {
			c.w.B = binary.AppendVarint(c.w.B, *v)
			continue
		}
		if c.r.Err != nil {
			*v = 0
			continue
		}
		x, n := binary.Varint(c.r.B)
		if n <= 0 || n != varintLen(x) {
			c.r.Err = wire.ErrTruncated
			if n > 0 {
				c.r.Err = errNotCanonical
			}
			*v = 0
			continue
		}
		c.r.B = c.r.B[n:]
		*v = x
	}
}

func (c *coder) i32(p *int32) {
	x := int64(*p)
	c.i64(&x)
	if c.r != nil {
		if x != int64(int32(x)) && c.r.Err == nil {
			c.r.Err = errors.New("sequencer: a 32-bit field out of range")
		}
		*p = int32(x)
	}
}

func (c *coder) u64(p ...*uint64) {
	for _, v := range p {
		if c.w != nil {
			c.w.Uvarint(*v)
			continue
		}
		*v = 0
		if c.r.Err != nil {
			continue
		}
		x, n := binary.Uvarint(c.r.B)
		if n <= 0 || n != uvarintLen(x) {
			c.r.Err = errNotCanonical
			if n <= 0 {
				c.r.Err = wire.ErrTruncated
			}
			continue
		}
		c.r.B = c.r.B[n:]
		*v = x
	}
}

func (c *coder) u8(p *uint8) {
	if c.w != nil {
		c.w.U8(*p)
		return
	}
	*p = c.r.U8()
}

// count is a list's length. Unlike wire.Reader.Count it requires the
// shortest form too: 0x80 0x00 is also zero, and a record that decodes
// must re-encode to itself.
func (c *coder) count(n, minSize int) int {
	if c.w != nil {
		c.w.Uvarint(uint64(n))
		return n
	}
	var x uint64
	c.u64(&x)
	if c.r.Err == nil && x > uint64(len(c.r.B)/max(minSize, 1)) {
		c.r.Err = wire.ErrTruncated
	}
	if c.r.Err != nil {
		return 0
	}
	return int(x)
}

func (x *Publish) code(c *coder) {
	c.str(&x.Group, &x.MsgID)
	c.u64(&x.Seq)
	c.bytes(&x.Payload)
	c.i64(&x.RetentionNs)
}
func (x *PublishBatch) code(c *coder) {
	n := c.count(len(x.Msgs), 5) // an empty Publish takes 5 bytes
	if c.r != nil {
		x.Msgs = make([]Publish, n)
	}
	for i := range x.Msgs {
		x.Msgs[i].code(c)
	}
}
func (x *Lease) code(c *coder) { c.str(&x.Group, &x.Processor); c.i32(&x.Max); c.i64(&x.LeaseNs) }

// leaseBytes codes a Lease with MaxBytes under a tag of its own, so that
// leases logged before it decode as they were: positive, so that a
// decoded record re-encodes under the same tag.
type leaseBytes struct{ *Lease }

func (x leaseBytes) code(c *coder) {
	x.Lease.code(c)
	c.i64(&x.MaxBytes)
	if c.r != nil && x.MaxBytes <= 0 && c.r.Err == nil {
		c.r.Err = errors.New("a byte-bounded lease has no positive bound")
	}
}
func (x *Complete) code(c *coder) { c.str(&x.Group); c.u64(&x.Seq); c.str(&x.Processor) }
func (x *CompleteBatch) code(c *coder) {
	c.str(&x.Group, &x.Processor)
	n := c.count(len(x.Seqs), 1)
	if c.r != nil {
		x.Seqs = make([]uint64, n)
	}
	for i := range x.Seqs {
		c.u64(&x.Seqs[i])
	}
}
func (x *Extend) code(c *coder)  { c.str(&x.Group, &x.Processor); c.i64(&x.LeaseNs) }
func (x *Release) code(c *coder) { c.str(&x.Group, &x.Processor) }

// releaseSeqs codes a Release with Seqs: at least one, so that a decoded
// record re-encodes under the same tag.
type releaseSeqs struct{ *Release }

func (x releaseSeqs) code(c *coder) {
	x.Release.code(c)
	n := c.count(len(x.Seqs), 1)
	if c.r != nil {
		if n == 0 && c.r.Err == nil {
			c.r.Err = errors.New("a release of listed seqs lists none")
		}
		x.Seqs = make([]uint64, n)
	}
	for i := range x.Seqs {
		c.u64(&x.Seqs[i])
	}
}
func (x *Commit) code(c *coder)        { c.str(&x.Group, &x.Consumer); c.u64(&x.Position) }
func (x *DeleteGroup) code(c *coder)   { c.str(&x.Group) }
func (x *LeaseExpired) code(c *coder)  { c.str(&x.Group); c.u64(&x.Seq) }
func (x *PurgeMessages) code(c *coder) {}

type coded interface {
	engine.Command
	code(c *coder)
}

func encode(b []byte, tag byte, x coded) ([]byte, error) {
	w := wire.Writer{B: append(b, tag)}
	x.code(&coder{w: &w})
	return w.B, nil
}

func (x *Publish) AppendBinary(b []byte) ([]byte, error)      { return encode(b, tagPublish, x) }
func (x *PublishBatch) AppendBinary(b []byte) ([]byte, error) { return encode(b, tagPublishBatch, x) }
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
	}
	return nil
}

var errUnknownCommand = errors.New("sequencer: unknown command tag")

// Decode implements engine.Machine.
func (m *Machine) Decode(data []byte) (engine.Command, error) { return Decode(data) }

// Decode needs no state. Trailing bytes are an error: a record that
// decodes from a prefix of itself is not what was written.
func Decode(data []byte) (engine.Command, error) {
	if len(data) == 0 {
		return nil, errUnknownCommand
	}
	cmd := newCommand(data[0])
	if cmd == nil {
		return nil, fmt.Errorf("%w %d", errUnknownCommand, data[0])
	}
	r := wire.Reader{B: data[1:]}
	cmd.code(&coder{r: &r})
	if r.Err == nil && len(r.B) > 0 {
		r.Err = fmt.Errorf("%d bytes after the command", len(r.B))
	}
	if r.Err != nil {
		return nil, fmt.Errorf("sequencer: decoding command %d: %w", data[0], r.Err)
	}
	switch c := cmd.(type) {
	case releaseSeqs:
		return c.Release, nil
	case leaseBytes:
		return c.Lease, nil
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

func (x *msg) code(c *coder) {
	st := uint8(x.State)
	c.u8(&st)
	if c.r != nil {
		// Only when decoding: a snapshot encodes a fork's slots off the
		// partition while the partition reads them (a write of the same
		// value is still a race).
		x.State = State(st)
	}
	if x.State == MsgGap {
		return
	}
	c.str(&x.ID)
	c.bytes(&x.Payload)
	c.i64(&x.Created, &x.Processing, &x.Processed, &x.Released, &x.RetentionNs)
	if x.State == MsgLeased {
		c.str(&x.Processor)
		c.i64(&x.LeaseUntil)
	}
}

func (g *Group) code(c *coder) {
	c.str(&g.Name)
	mode := uint8(g.Mode)
	c.u8(&mode)
	if c.r != nil {
		g.Mode = Mode(mode)
	}
	c.i64(&g.CreatedAt)
	c.u64(&g.base, &g.position)
}

// AppendSnapshot implements engine.Machine.
func (m *Machine) AppendSnapshot(dst []byte) []byte {
	names := slices.Sorted(maps.Keys(m.groups))
	w := wire.Writer{B: dst}
	c := &coder{w: &w}
	w.Uvarint(snapshotVersion)
	c.count(len(names), 1)
	for _, n := range names {
		g := m.groups[n]
		g.code(c)
		cons := slices.Sorted(maps.Keys(g.consumers))
		c.count(len(cons), 2)
		for _, name := range cons {
			pos := g.consumers[name]
			c.str(&name)
			c.u64(&pos)
		}
		c.count(int(g.end+1-g.base), 1)
		for seq := g.base; seq <= g.end; seq++ {
			g.at(seq).code(c)
		}
	}
	c.count(m.purgeQ.Len(), 2)
	for e := range m.purgeQ.All() {
		c.str(&e.Group)
		c.i64(&e.At)
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
	c := &coder{r: &r}
	if v := r.Uvarint(); r.Err == nil && v != snapshotVersion {
		return fmt.Errorf("version %d, this build reads %d", v, snapshotVersion)
	}
	prev := ""
	for ng := c.count(0, 5); ng > 0 && r.Err == nil; ng-- {
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
		for nc := c.count(0, 2); nc > 0 && r.Err == nil; nc-- {
			var name string
			var pos uint64
			c.str(&name)
			c.u64(&pos)
			if r.Err == nil && (name == "" || len(name) > MaxIDLen || (lastCons != "" && name <= lastCons) || pos > g.position) {
				return fmt.Errorf("group %q: consumer %q at %d", g.Name, name, pos)
			}
			lastCons = name
			g.consumers[name] = pos
		}
		n := c.count(0, 1)
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
			g.appendSlot(x)
		}
	}
	for n := c.count(0, 2); n > 0 && r.Err == nil; n-- {
		var e purgeEntry
		c.str(&e.Group)
		c.i64(&e.At)
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
