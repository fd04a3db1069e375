package wire

import (
	"errors"
	"fmt"
	"slices"
)

// Coder writes (W set) or reads (R set) one field at a time, so that a
// type lists its fields once, in one method, for both directions, and its
// encoder and decoder cannot drift apart:
//
//	func (x *Thing) code(c *wire.Coder) { c.Str(&x.Name); c.I64(&x.At) }
//
// Reading, each method stores what it read (a zero value once R.Err is
// set), so a decoder codes a whole structure and checks R.Err once. What
// it reads is held to the package's canonical-form rule.
type Coder struct {
	W *Writer
	R *Reader
	// Version is the version of the snapshot being read or written, for
	// types whose fields changed between versions; 0 for a command.
	Version uint64
}

// Reading tells whether c decodes.
func (c *Coder) Reading() bool { return c.R != nil }

// Str codes length-prefixed strings. Reading from a SharedReader, they
// are substrings of its source; otherwise copies.
func (c *Coder) Str(p ...*string) {
	for _, s := range p {
		if c.W != nil {
			c.W.Str(*s)
		} else {
			*s = c.R.Str()
		}
	}
}

// Bytes codes a length-prefixed byte string. It copies on read, and an
// empty one reads as nil: a decoded value outlives the buffer it came
// from, and a payload must not pin a whole log batch.
func (c *Coder) Bytes(p *[]byte) {
	if c.W != nil {
		c.W.Bytes(*p)
		return
	}
	b := c.R.Bytes()
	*p = nil
	if len(b) > 0 {
		*p = slices.Clone(b)
	}
}

// I64 codes zig-zag varints: quantities and times are mostly small, but a
// decoder must take any value.
func (c *Coder) I64(p ...*int64) {
	for _, v := range p {
		if c.W != nil {
			c.W.Varint(*v)
		} else {
			*v = c.R.Varint()
		}
	}
}

// errRange is a 32-bit field whose varint holds a wider number: it would
// re-encode as another number.
var errRange = errors.New("wire: a 32-bit field out of range")

// I32 codes zig-zag varints that must fit 32 bits.
func (c *Coder) I32(p ...*int32) {
	for _, v := range p {
		if c.W != nil {
			c.W.Varint(int64(*v))
			continue
		}
		x := c.R.Varint()
		if x != int64(int32(x)) && c.R.Err == nil {
			c.R.Err = errRange
		}
		*v = int32(x)
	}
}

// U64 codes unsigned varints.
func (c *Coder) U64(p ...*uint64) {
	for _, v := range p {
		if c.W != nil {
			c.W.Uvarint(*v)
		} else {
			*v = c.R.Uvarint()
		}
	}
}

// U8 codes a byte.
func (c *Coder) U8(p *uint8) {
	if c.W != nil {
		c.W.U8(*p)
	} else {
		*p = c.R.U8()
	}
}

// Bool codes a byte 0 or 1.
func (c *Coder) Bool(p *bool) {
	if c.W != nil {
		c.W.Bool(*p)
	} else {
		*p = c.R.Bool()
	}
}

// Count codes a list's length n. Reading, it returns the length read,
// bounded by what the input could hold at minSize bytes per element (see
// Reader.Count); writing, n.
func (c *Coder) Count(n, minSize int) int {
	if c.W != nil {
		c.W.Uvarint(uint64(n))
		return n
	}
	return c.R.Count(minSize)
}

// Strs codes a list of strings; an empty one reads as nil.
func (c *Coder) Strs(p *[]string) {
	n := c.Count(len(*p), 1)
	if c.R != nil {
		*p = nil
		if n > 0 {
			*p = make([]string, n)
		}
	}
	for i := range *p {
		c.Str(&(*p)[i])
	}
}

// Ptrs returns pointers to s's elements, for Str(Ptrs(s)...).
func Ptrs(s []string) []*string {
	p := make([]*string, len(s))
	for i := range s {
		p[i] = &s[i]
	}
	return p
}

// ErrUnknownTag is a command whose tag byte names no command.
var ErrUnknownTag = errors.New("unknown command tag")

// DecodeCommand reads a command encoded as a tag byte and its fields from
// r: newCmd gives the value a tag decodes into (nil for no command), code
// reads its fields into it. Bytes after them are refused: a record that
// decodes from a prefix of itself is not what was written.
func DecodeCommand[T any](r Reader, newCmd func(tag byte) T, code func(T, *Coder)) (T, error) {
	return DecodeCommandWith(new(Decoder), r, newCmd, code)
}

// Decoder is the Reader and Coder a command is decoded with, for a caller
// that decodes one command after another (a partition's machine) to
// reuse: code is called through a func value, so a Reader and Coder of
// DecodeCommand's own escape to the heap, two allocations per command.
// One Decoder decodes one command at a time.
type Decoder struct {
	r Reader
	c Coder
}

// DecodeCommandWith is DecodeCommand reading with d. What it decodes does
// not refer to d, and d keeps nothing of r once it returns.
func DecodeCommandWith[T any](d *Decoder, r Reader, newCmd func(tag byte) T, code func(T, *Coder)) (T, error) {
	var none T
	if len(r.B) == 0 {
		return none, ErrUnknownTag
	}
	d.r = r
	defer func() { d.r = Reader{} }()
	tag := d.r.U8()
	cmd := newCmd(tag)
	if any(cmd) == nil {
		return none, fmt.Errorf("%w %d", ErrUnknownTag, tag)
	}
	d.c = Coder{R: &d.r}
	code(cmd, &d.c)
	if d.r.Err == nil && len(d.r.B) > 0 {
		d.r.Err = fmt.Errorf("%d bytes after the command", len(d.r.B))
	}
	if d.r.Err != nil {
		return none, fmt.Errorf("decoding command %d: %w", tag, d.r.Err)
	}
	return cmd, nil
}
