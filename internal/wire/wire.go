// Package wire has the little-endian, length-prefixed encoding helpers that
// log records and snapshots are written with. A Reader remembers its first
// error, so decoders read a whole structure and check once at the end.
//
// One canonical-form rule holds for everything a Reader reads: a value is
// accepted only in the one form a Writer writes it in (a varint in its
// shortest form, a boolean as 0 or 1). Bytes that decode then re-encode to
// themselves, so a logged record or a snapshot means one value.
package wire

import (
	"encoding/binary"
	"errors"
	"math"
	"unsafe"
)

var (
	// ErrTruncated means the input ended in the middle of a value.
	ErrTruncated = errors.New("wire: data is truncated")
	// ErrNotCanonical means a value is not in the form a Writer writes it
	// in: a varint longer than its value needs, a boolean neither 0 nor 1.
	ErrNotCanonical = errors.New("wire: a value in another form than the one it is written in")
)

// Writer appends to B.
type Writer struct{ B []byte }

func (w *Writer) U8(v uint8)   { w.B = append(w.B, v) }
func (w *Writer) U16(v uint16) { w.B = binary.LittleEndian.AppendUint16(w.B, v) }
func (w *Writer) U32(v uint32) { w.B = binary.LittleEndian.AppendUint32(w.B, v) }
func (w *Writer) U64(v uint64) { w.B = binary.LittleEndian.AppendUint64(w.B, v) }
func (w *Writer) I32(v int32)  { w.U32(uint32(v)) }
func (w *Writer) F64(v float64) {
	w.U64(math.Float64bits(v))
}
func (w *Writer) Uvarint(v uint64) { w.B = binary.AppendUvarint(w.B, v) }

// Varint is a zig-zag varint: small negative numbers stay short.
func (w *Writer) Varint(v int64) { w.B = binary.AppendVarint(w.B, v) }

// Bool is a byte 0 or 1.
func (w *Writer) Bool(v bool) {
	if v {
		w.U8(1)
	} else {
		w.U8(0)
	}
}
func (w *Writer) Bytes(v []byte) {
	w.Uvarint(uint64(len(v)))
	w.B = append(w.B, v...)
}
func (w *Writer) Str(v string) {
	w.Uvarint(uint64(len(v)))
	w.B = append(w.B, v...)
}

// Reader consumes B.
type Reader struct {
	B      []byte
	Err    error
	shared bool // B is a string's memory: see SharedReader
}

func (r *Reader) need(n int) bool {
	if r.Err != nil {
		return false
	}
	if n < 0 || len(r.B) < n {
		r.Err = ErrTruncated
		return false
	}
	return true
}

func (r *Reader) U8() uint8 {
	if !r.need(1) {
		return 0
	}
	v := r.B[0]
	r.B = r.B[1:]
	return v
}
func (r *Reader) U16() uint16 {
	if !r.need(2) {
		return 0
	}
	v := binary.LittleEndian.Uint16(r.B)
	r.B = r.B[2:]
	return v
}
func (r *Reader) U32() uint32 {
	if !r.need(4) {
		return 0
	}
	v := binary.LittleEndian.Uint32(r.B)
	r.B = r.B[4:]
	return v
}
func (r *Reader) U64() uint64 {
	if !r.need(8) {
		return 0
	}
	v := binary.LittleEndian.Uint64(r.B)
	r.B = r.B[8:]
	return v
}
func (r *Reader) I32() int32   { return int32(r.U32()) }
func (r *Reader) F64() float64 { return math.Float64frombits(r.U64()) }

// Uvarint reads a varint in its shortest form: 0x80 0x00 is zero too, but
// not as a Writer writes it. A varint of more than one byte is in its
// shortest form exactly when its last byte is not 0.
func (r *Reader) Uvarint() uint64 {
	if r.Err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.B)
	switch {
	case n <= 0:
		r.Err = ErrTruncated
		return 0
	case n > 1 && r.B[n-1] == 0:
		r.Err = ErrNotCanonical
		return 0
	}
	r.B = r.B[n:]
	return v
}

// Varint reads a zig-zag varint in its shortest form.
func (r *Reader) Varint() int64 {
	u := r.Uvarint()
	return int64(u>>1) ^ -int64(u&1)
}

// Bool reads a byte that must be 0 or 1.
func (r *Reader) Bool() bool {
	switch r.U8() {
	case 0:
		return false
	case 1:
		return true
	}
	if r.Err == nil {
		r.Err = ErrNotCanonical
	}
	return false
}

// Bytes returns a sub-slice of the input (no copy).
func (r *Reader) Bytes() []byte {
	n := r.Uvarint()
	if n > uint64(len(r.B)) {
		r.Err = ErrTruncated
		return nil
	}
	if !r.need(int(n)) {
		return nil
	}
	v := r.B[:n:n]
	r.B = r.B[n:]
	return v
}

// Next returns the next n bytes (no copy).
func (r *Reader) Next(n int) []byte {
	if !r.need(n) {
		return nil
	}
	v := r.B[:n:n]
	r.B = r.B[n:]
	return v
}

// Str returns a length-prefixed string: a copy, or, for a reader from
// SharedReader, a substring of its source.
func (r *Reader) Str() string {
	b := r.Bytes()
	if r.shared && len(b) > 0 {
		return unsafe.String(unsafe.SliceData(b), len(b))
	}
	return string(b)
}

// SharedReader reads s, and its Str returns substrings of s instead of
// copies. A decoded command whose strings end up in the state then costs
// one allocation instead of one per string, and the collector has one
// object to mark instead of ten. The price: any one retained string keeps
// all of s alive, so it suits short records whose strings mostly stay
// together (a command), not a snapshot whose entities are purged one by
// one. r.B aliases s's bytes and must never be written.
func SharedReader(s string) Reader {
	return Reader{B: unsafe.Slice(unsafe.StringData(s), len(s)), shared: true}
}

// Count reads a length prefix for a list whose elements take at least
// minSize bytes each, so a corrupt count cannot make the caller allocate
// more than the input could hold.
func (r *Reader) Count(minSize int) int {
	n := r.Uvarint()
	if minSize < 1 {
		minSize = 1
	}
	if n > uint64(len(r.B)/minSize) {
		if r.Err == nil {
			r.Err = ErrTruncated
		}
		return 0
	}
	return int(n)
}
