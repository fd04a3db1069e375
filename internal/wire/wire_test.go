package wire

import (
	"encoding/binary"
	"errors"
	"reflect"
	"testing"
	"unsafe"
)

// A shared reader's strings are substrings of its source and read the
// same values as a copying reader's.
func TestSharedReaderStr(t *testing.T) {
	var w Writer
	w.Str("alpha")
	w.Str("")
	w.Str("gamma")
	src := string(w.B)
	r := SharedReader(src)
	c := Reader{B: w.B}
	for i := 0; i < 3; i++ {
		a, b := r.Str(), c.Str()
		if a != b {
			t.Fatalf("string %d: shared %q, copy %q", i, a, b)
		}
		if len(a) > 0 {
			off := uintptr(unsafe.Pointer(unsafe.StringData(a))) - uintptr(unsafe.Pointer(unsafe.StringData(src)))
			if off >= uintptr(len(src)) {
				t.Fatalf("string %d was copied, not shared", i)
			}
		}
	}
	if r.Err != nil || len(r.B) != 0 {
		t.Fatalf("err %v, %d left", r.Err, len(r.B))
	}
	r.Str()
	if r.Err == nil {
		t.Fatal("reading past the end gave no error")
	}
}

// A value in any form but the one a Writer writes is refused, whichever
// method reads it: the canonical-form rule every decoder relies on for
// byte-exact round trips.
func TestNonCanonicalRefused(t *testing.T) {
	for name, tc := range map[string]struct {
		in   []byte
		read func(*Reader)
	}{
		"uvarint 0 in two bytes":     {[]byte{0x80, 0x00}, func(r *Reader) { r.Uvarint() }},
		"uvarint 1 in three bytes":   {[]byte{0x81, 0x80, 0x00}, func(r *Reader) { r.Uvarint() }},
		"varint -1 in two bytes":     {[]byte{0x81, 0x00}, func(r *Reader) { r.Varint() }},
		"length 0 in two bytes":      {[]byte{0x80, 0x00}, func(r *Reader) { r.Str() }},
		"bytes length in two bytes":  {[]byte{0x81, 0x00, 'x'}, func(r *Reader) { r.Bytes() }},
		"count 0 in two bytes":       {[]byte{0x80, 0x00}, func(r *Reader) { r.Count(1) }},
		"boolean 2":                  {[]byte{2}, func(r *Reader) { r.Bool() }},
		"shared string in two bytes": {[]byte{0x80, 0x00}, func(r *Reader) { s := SharedReader(string(r.B)); s.Str(); r.Err = s.Err }},
	} {
		r := Reader{B: tc.in}
		tc.read(&r)
		if !errors.Is(r.Err, ErrNotCanonical) {
			t.Errorf("%s: err %v, want %v", name, r.Err, ErrNotCanonical)
		}
	}
	r := Reader{B: []byte{0x80}}
	if r.Uvarint(); !errors.Is(r.Err, ErrTruncated) {
		t.Errorf("a cut varint: err %v, want %v", r.Err, ErrTruncated)
	}
}

type sample struct {
	S    string
	L    []string
	B    []byte
	I    int64
	J    int32
	U    uint64
	Byte uint8
	OK   bool
}

func (x *sample) code(c *Coder) {
	c.Str(&x.S)
	c.Strs(&x.L)
	c.Bytes(&x.B)
	c.I64(&x.I)
	c.I32(&x.J)
	c.U64(&x.U)
	c.U8(&x.Byte)
	c.Bool(&x.OK)
}

// A Coder reads back what it wrote, and every prefix of it is refused.
func TestCoderRoundTrip(t *testing.T) {
	for _, in := range []sample{
		{},
		{S: "s", L: []string{"a", ""}, B: []byte{0, 1}, I: -1 << 63, J: -1 << 31, U: 1<<64 - 1, Byte: 0xff, OK: true},
		{I: 1<<63 - 1, J: 1<<31 - 1, U: 300},
	} {
		var w Writer
		in.code(&Coder{W: &w})
		var out sample
		r := Reader{B: w.B}
		out.code(&Coder{R: &r})
		if r.Err != nil || len(r.B) != 0 || !reflect.DeepEqual(in, out) {
			t.Fatalf("%+v came back as %+v (err %v, %d left)", in, out, r.Err, len(r.B))
		}
		for i := range len(w.B) {
			r := Reader{B: w.B[:i]}
			out.code(&Coder{R: &r})
			if r.Err == nil {
				t.Fatalf("%+v: a prefix of %d of %d bytes reads", in, i, len(w.B))
			}
		}
	}
}

// A 32-bit field whose varint holds a wider number is refused: it would
// re-encode as another number.
func TestCoderI32Range(t *testing.T) {
	var w Writer
	w.Varint(1 << 31)
	r := Reader{B: w.B}
	var v int32
	(&Coder{R: &r}).I32(&v)
	if r.Err == nil {
		t.Fatalf("read %d from a 32-bit field holding 1<<31", v)
	}
}

// Uvarint's test of the shortest form (the last byte) agrees with the
// length of the shortest encoding, for every length. (It replaces the
// sequencer's test of the uvarintLen and varintLen its codec computed.)
func TestUvarintCanonicalAgreesWithLength(t *testing.T) {
	for _, v := range []uint64{0, 1, 127, 128, 255, 16383, 16384, 1<<35 - 1, 1 << 35, 1<<63 - 1, 1 << 63, 1<<64 - 1} {
		short := binary.AppendUvarint(nil, v)
		r := Reader{B: short}
		if got := r.Uvarint(); got != v || r.Err != nil {
			t.Errorf("%d: read %d, %v", v, got, r.Err)
		}
		// The same value padded to a byte longer, where that fits a uvarint.
		if len(short) < binary.MaxVarintLen64 {
			long := append(append([]byte(nil), short...), 0)
			long[len(short)-1] |= 0x80
			r := Reader{B: long}
			if got := r.Uvarint(); !errors.Is(r.Err, ErrNotCanonical) {
				t.Errorf("%d padded to %x: read %d, %v", v, long, got, r.Err)
			}
		}
	}
}
