package commerce

import (
	"encoding/binary"
	"errors"

	"github.com/surge-run/surge/internal/wire"
)

// eventLog is one entity's history held as the snapshot writes it: the
// events back to back in Event.code's encoding, in one pointer-free
// buffer. Histories are most of what a long run keeps (about ten events
// per order, each with its fields); as objects they were an allocation per
// event and a string per field, and a quarter of the server's CPU went to
// the collector scanning them. A buffer of bytes is never scanned, and a
// snapshot copies it as it is.
type eventLog struct {
	buf  []byte
	n    int    // events in buf
	last uint64 // sequence number of the newest event (0: none yet)
}

// add appends the event typ at now with kv as field pairs, dropping the
// oldest events down to MaxEventsPerEntity once the log holds twice that.
func (l *eventLog) add(typ string, now int64, kv []string) {
	if l.n >= 2*MaxEventsPerEntity {
		rest := l.buf
		for i := 0; i < l.n-MaxEventsPerEntity; i++ {
			rest = skipEvent(rest)
		}
		l.buf = append(make([]byte, 0, 2*len(rest)), rest...)
		l.n = MaxEventsPerEntity
	}
	l.last++
	b := binary.AppendUvarint(l.buf, l.last)
	b = appendStr(b, typ)
	b = binary.AppendVarint(b, now)
	b = binary.AppendUvarint(b, uint64(len(kv)/2))
	for i := 0; i+1 < len(kv); i += 2 {
		b = appendStr(b, kv[i])
		b = appendStr(b, kv[i+1])
	}
	l.buf = b
	l.n++
}

// addDecoded appends an event read from a snapshot, keeping its sequence
// number; they must rise.
func (l *eventLog) addDecoded(e *Event) error {
	if e.Seq <= l.last {
		return errors.New("commerce: a snapshot's event sequence numbers do not rise")
	}
	w := wire.Writer{B: l.buf}
	e.code(&coder{w: &w})
	l.buf, l.last = w.B, e.Seq
	l.n++
	return nil
}

// newest decodes the newest k events (all if k ≥ n), oldest first.
func (l *eventLog) newest(k int) []Event {
	k = min(max(k, 0), l.n)
	rest := l.buf
	for i := 0; i < l.n-k; i++ {
		rest = skipEvent(rest)
	}
	out := make([]Event, k)
	r := wire.Reader{B: rest}
	c := coder{r: &r}
	for i := range out {
		out[i].code(&c)
	}
	if r.Err != nil {
		// The buffer is only ever written by add: a failure here is a bug.
		panic("commerce: corrupt event log: " + r.Err.Error())
	}
	return out
}

// skipEvent returns b after its first event. b holds whole events written
// by add, so the varints and lengths are well formed.
func skipEvent(b []byte) []byte {
	_, n := binary.Uvarint(b) // seq
	b = b[n:]
	b = skipStr(b) // type
	_, n = binary.Varint(b)
	b = b[n:]
	f, n := binary.Uvarint(b)
	b = b[n:]
	for i := uint64(0); i < 2*f; i++ {
		b = skipStr(b)
	}
	return b
}

func appendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func skipStr(b []byte) []byte {
	l, n := binary.Uvarint(b)
	return b[n+int(l):]
}
