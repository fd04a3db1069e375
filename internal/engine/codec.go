package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/surge-run/surge/internal/cmdlog"
	"github.com/surge-run/surge/internal/wire"
)

// Log record envelope, version 1:
//
//	[0]     envelope version
//	[1]     input kind
//	[2]     workload id
//	[3:11]  time, unix ns, little endian
//	FromMessage: [11:15] source partition, [15:23] sequence
//	FromTimer:   [11:13] id length n, [13:13+n] id
//	then the command bytes (FromClient, FromMessage; empty for FromTimer,
//	whose command lives in the timer table)
const envelopeVersion = 1

const envHeader = 11

// msgHeader is the envelope of a FromMessage record.
const msgHeader = envHeader + 4 + 8

// MaxCommandBytes is the largest encoding of a client command (or of a
// timer's command) the engine takes: its log entry, envelope included, is
// then at most cmdlog.MaxEntryBytes. Larger ones get ErrTooLarge.
const MaxCommandBytes = cmdlog.MaxEntryBytes - envHeader

// maxMessageBytes is the largest encoding of a message Effects.Send takes:
// its entry at the receiver is at most cmdlog.MaxEntryBytes.
const maxMessageBytes = cmdlog.MaxEntryBytes - msgHeader

// tooLarge is the error of a log entry of n bytes that no log takes.
func tooLarge(what string, n int) error {
	return fmt.Errorf("%w: the %s would need a log entry of %d bytes; the limit is %d bytes", ErrTooLarge, what, n, cmdlog.MaxEntryBytes)
}

type envelope struct {
	kind     InputKind
	workload uint8
	timeNs   int64
	src      uint32
	seq      uint64
	timerID  string
	payload  []byte
}

func appendEnvelopeHeader(dst []byte, kind InputKind, wl uint8, timeNs int64) []byte {
	dst = append(dst, envelopeVersion, byte(kind), wl)
	return binary.LittleEndian.AppendUint64(dst, uint64(timeNs))
}

var (
	errShortRecord   = errors.New("engine: log record too short")
	errNewerEnvelope = errors.New("engine: log record from a newer Surge")
)

func decodeEnvelope(b []byte) (envelope, error) {
	var e envelope
	if len(b) < envHeader {
		return e, errShortRecord
	}
	if b[0] > envelopeVersion {
		return e, fmt.Errorf("%w: envelope version %d; this binary reads version %d (run the release that wrote it)", errNewerEnvelope, b[0], envelopeVersion)
	}
	if b[0] != envelopeVersion {
		return e, fmt.Errorf("engine: log record has unknown envelope version %d", b[0])
	}
	e.kind = InputKind(b[1])
	e.workload = b[2]
	e.timeNs = int64(binary.LittleEndian.Uint64(b[3:11]))
	b = b[envHeader:]
	switch e.kind {
	case FromClient:
	case FromMessage:
		if len(b) < 12 {
			return e, errShortRecord
		}
		e.src = binary.LittleEndian.Uint32(b)
		e.seq = binary.LittleEndian.Uint64(b[4:])
		b = b[12:]
	case FromTimer:
		if len(b) < 2 {
			return e, errShortRecord
		}
		n := int(binary.LittleEndian.Uint16(b))
		if len(b) < 2+n {
			return e, errShortRecord
		}
		e.timerID = string(b[2 : 2+n])
		b = b[2+n:]
	default:
		return e, fmt.Errorf("engine: log record has unknown input kind %d", e.kind)
	}
	e.payload = b
	return e, nil
}

// Partition snapshot, version 2: the partition count and the number of the
// partition's log records it covers (checked against the log on recovery),
// the engine's own per-partition state (outgoing sequence,
// unacknowledged outbox, receive high-water marks, pending timers), then
// each workload machine's snapshot. Version 1 lacked the first two;
// version 3 added each outbox message's prev and the last seq sent to each
// target (cluster mode orders messages by them).
const snapshotVersion = 3

// forkSnapshot captures the partition's state as of now and returns a
// function that encodes it. The engine's own state is encoded at once (it
// is small); a machine that implements SnapshotForker is encoded later by
// the returned function, on any goroutine, while the partition goes on.
// Kept whole on purpose: it writes the format field by field, in the order
// restoreSnapshot reads it.
func (p *partition) forkSnapshot() func(dst []byte) []byte {
	w := wire.Writer{}
	w.U32(snapshotVersion)
	w.U32(uint32(p.id))
	w.U32(uint32(len(p.e.parts)))
	w.U64(p.records)
	w.U64(p.outSeq)

	seqs := slices.Sorted(maps.Keys(p.outbox))
	w.U32(uint32(len(seqs)))
	for _, s := range seqs {
		m := p.outbox[s]
		w.U64(s)
		w.U32(uint32(m.target))
		w.U8(m.workload)
		w.Bytes(m.data)
		w.U64(m.prev)
	}
	targets := slices.Sorted(maps.Keys(p.lastTo))
	w.U32(uint32(len(targets)))
	for _, t := range targets {
		w.U32(uint32(t))
		w.U64(p.lastTo[t])
	}

	srcs := slices.Sorted(maps.Keys(p.hwm))
	w.U32(uint32(len(srcs)))
	for _, s := range srcs {
		w.U32(s)
		w.U64(p.hwm[s])
	}

	timers := p.timers.sorted()
	w.U32(uint32(len(timers)))
	for _, t := range timers {
		w.U8(t.workload)
		w.Str(t.id)
		w.U64(uint64(t.atNs))
		w.Bytes(t.data)
	}
	w.U32(uint32(len(p.machines)))
	head := w.B

	type part struct {
		id     uint8
		encode func(dst []byte) []byte
	}
	var parts []part
	for i, m := range p.machines {
		if m == nil {
			continue
		}
		if f, ok := m.(SnapshotForker); ok {
			parts = append(parts, part{uint8(i), f.ForkSnapshot()})
			continue
		}
		data := m.AppendSnapshot(nil)
		parts = append(parts, part{uint8(i), func(dst []byte) []byte { return append(dst, data...) }})
	}
	return func(dst []byte) []byte {
		w := wire.Writer{B: append(dst, head...)}
		for _, pt := range parts {
			w.U8(pt.id)
			start := len(w.B)
			w.U32(0)
			w.B = pt.encode(w.B)
			binary.LittleEndian.PutUint32(w.B[start:], uint32(len(w.B)-start-4))
		}
		w.U8(0xff) // end of machines
		return w.B
	}
}

// appendSnapshot encodes the partition's state now.
func (p *partition) appendSnapshot(dst []byte) []byte { return p.forkSnapshot()(dst) }

func (p *partition) restoreSnapshot(data []byte) error {
	r := wire.Reader{B: data}
	v := r.U32()
	if r.Err == nil && v != snapshotVersion && v != 2 {
		return fmt.Errorf("engine: partition snapshot has version %d; this binary reads versions 2 and %d", v, snapshotVersion)
	}
	if id := r.U32(); r.Err == nil && int(id) != p.id {
		return fmt.Errorf("engine: snapshot belongs to partition %d, not %d", id, p.id)
	}
	if n := r.U32(); r.Err == nil && int(n) != len(p.e.parts) {
		return fmt.Errorf("engine: the snapshot of partition %d was written with %d partitions, not %d; keys would move to other partitions. Start with the partition count the data was written with",
			p.id, n, len(p.e.parts))
	}
	p.records = r.U64()
	p.outSeq = r.U64()
	n := int(r.U32())
	for i := 0; i < n && r.Err == nil; i++ {
		s := r.U64()
		m := outMsg{target: int(r.U32()), workload: r.U8()}
		if m.target >= len(p.e.parts) {
			return fmt.Errorf("engine: snapshot of partition %d has a message for partition %d of %d", p.id, m.target, len(p.e.parts))
		}
		m.data = append([]byte(nil), r.Bytes()...)
		if v >= 3 {
			m.prev = r.U64()
		}
		m.seq = s
		m.durable.Store(true)
		p.outbox[s] = &m
	}
	if v >= 3 {
		n = int(r.U32())
		for i := 0; i < n && r.Err == nil; i++ {
			t := int(r.U32())
			p.lastTo[t] = r.U64()
		}
	}
	n = int(r.U32())
	for i := 0; i < n && r.Err == nil; i++ {
		s := r.U32()
		p.hwm[s] = r.U64()
	}
	n = int(r.U32())
	for i := 0; i < n && r.Err == nil; i++ {
		wl := r.U8()
		id := r.Str()
		at := int64(r.U64())
		d := append([]byte(nil), r.Bytes()...)
		p.timers.set(wl, id, at, d)
	}
	r.U32() // machine slots, informative
	for r.Err == nil {
		wl := r.U8()
		if wl == 0xff {
			break
		}
		body := r.Next(int(r.U32()))
		if r.Err != nil {
			break
		}
		if int(wl) >= len(p.machines) || p.machines[wl] == nil {
			return fmt.Errorf("engine: snapshot holds state of workload %d, which this binary does not know", wl)
		}
		if err := p.machines[wl].Restore(body); err != nil {
			return fmt.Errorf("engine: restoring workload %d in partition %d: %w", wl, p.id, err)
		}
	}
	return r.Err
}
