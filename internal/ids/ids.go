// Package ids is the one place that makes, writes and reads the ids the
// workloads hand out (random version-4 UUIDs), and that hashes keys.
//
// The hash decides which partition owns a key (engine.PartitionOf) and is
// baked into every log and snapshot written so far, so it must never
// change: it is 64-bit FNV-1a, pinned by this package's tests against
// hash/fnv and against fixed values.
package ids

import (
	"encoding/hex"
	"math/rand/v2"
)

// UUID is a UUID's 16 bytes. The zero UUID is "no id".
type UUID [16]byte

// Len is the length of a UUID's canonical text form.
const Len = 36

// New returns a random version-4 UUID drawn from math/rand/v2's global
// source (ChaCha8, seeded by the runtime): unique with overwhelming
// probability, and no system call per id.
func New() UUID { return FromUint64s(rand.Uint64(), rand.Uint64()) }

// FromUint64s makes a version-4 UUID from 128 bits: x's bytes (least
// significant first), then y's, with the version and variant bits set.
// Reproducible ids (a seeded load generator) come from here.
func FromUint64s(x, y uint64) UUID {
	var u UUID
	for i := range 8 {
		u[i] = byte(x >> (8 * i))
		u[8+i] = byte(y >> (8 * i))
	}
	return u.v4()
}

// V4 makes a version-4 UUID of 16 random bytes: it sets the version and
// variant bits.
func V4(b [16]byte) UUID { return UUID(b).v4() }

func (u UUID) v4() UUID {
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return u
}

// IsZero reports whether u is the zero UUID.
func (u UUID) IsZero() bool { return u == UUID{} }

// String is the canonical form: 36 bytes, lower-case hex, dashes after
// the 4th, 6th, 8th and 10th bytes.
func (u UUID) String() string {
	var b [Len]byte
	u.Put(&b)
	return string(b[:])
}

// Append appends the canonical form to b.
func (u UUID) Append(b []byte) []byte {
	var t [Len]byte
	u.Put(&t)
	return append(b, t[:]...)
}

// Put writes the canonical form into b, which a caller can keep on its
// stack (a hot path that hashes candidates before keeping one).
func (u UUID) Put(b *[Len]byte) {
	hex.Encode(b[0:8], u[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], u[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], u[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], u[8:10])
	b[23] = '-'
	hex.Encode(b[24:36], u[10:16])
}

// hexAt is where each byte's two hex digits are in the canonical form.
// Reading fixed positions (rather than skipping dashes wherever they are)
// means a misplaced dash is a non-hex digit, never a read past the end.
var hexAt = [16]uint8{0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34}

// Parse accepts exactly the canonical form, with hex digits in either
// case. It does not check the version: an id is whatever was issued.
func Parse(s string) (UUID, bool) {
	var u UUID
	if len(s) != Len || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return u, false
	}
	for j, i := range hexAt {
		hi, ok1 := unhex(s[i])
		lo, ok2 := unhex(s[i+1])
		if !ok1 || !ok2 {
			return UUID{}, false
		}
		u[j] = hi<<4 | lo
	}
	return u, true
}

// ParseLower is Parse of only the form String writes, lowercase: the
// test a job's id takes, on every submit, to be kept by its 16 bytes.
func ParseLower(s string) (UUID, bool) {
	var u UUID
	if len(s) != Len || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return u, false
	}
	bad := byte(0)
	for j, i := range hexAt {
		hi, lo := lowerHex[s[i]], lowerHex[s[i+1]]
		bad |= hi | lo
		u[j] = hi<<4 | lo&0xf
	}
	if bad&0xf0 != 0 {
		return UUID{}, false
	}
	return u, true
}

// lowerHex is each lowercase hex digit's value, 0xff for any other byte.
var lowerHex = func() (t [256]byte) {
	for c := range t {
		t[c] = 0xff
		if v, ok := unhex(byte(c)); ok && (c < 'A' || c > 'F') {
			t[c] = v
		}
	}
	return t
}()

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
