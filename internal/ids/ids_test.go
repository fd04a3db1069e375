package ids

import (
	"bytes"
	"hash/fnv"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"testing/quick"
)

var canonicalV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestNewIsAFreshV4(t *testing.T) {
	seen := map[UUID]bool{}
	for range 10000 {
		u := New()
		if !canonicalV4.MatchString(u.String()) || seen[u] {
			t.Fatalf("%s: not a fresh canonical v4 UUID", u)
		}
		seen[u] = true
	}
}

// The layout the workloads and the load generator used before this
// package: x's bytes least significant first, then y's, then the
// version and variant bits.
func TestFromUint64sLayout(t *testing.T) {
	got := FromUint64s(0x0123456789abcdef, 0xfedcba9876543210).String()
	if want := "efcdab89-6745-4301-9032-547698badcfe"; got != want {
		t.Fatalf("FromUint64s = %s, want %s", got, want)
	}
}

func TestV4SetsVersionAndVariant(t *testing.T) {
	var ff, zero [16]byte
	for i := range ff {
		ff[i] = 0xff
	}
	if u := V4(ff).String(); u != "ffffffff-ffff-4fff-bfff-ffffffffffff" {
		t.Fatalf("V4(ff...) = %s", u)
	}
	if u := V4(zero).String(); u != "00000000-0000-4000-8000-000000000000" {
		t.Fatalf("V4(00...) = %s", u)
	}
}

func TestAppendMatchesString(t *testing.T) {
	f := func(x, y uint64, prefix []byte) bool {
		u := FromUint64s(x, y)
		b := u.Append(bytes.Clone(prefix))
		return string(b) == string(prefix)+u.String()
	}
	if err := quick.Check(f, nil); err != nil {
		t.Fatal(err)
	}
}

func TestParseRejects(t *testing.T) {
	for _, s := range []string{
		"",
		"not-a-uuid",
		"0123456789abcdef0123456789abcdef",               // no dashes
		"01234567-89ab-cdef-0123-456789abcdef0",          // too long
		"01234567-89ab-cdef-0123-456789abcde",            // too short
		"0123456-789ab-cdef-0123-456789abcdef",           // misplaced dash
		"01234567-89ab-cdef-0123-456789abcdeg",           // not hex
		"01234567-89ab-cdef-0123--56789abcdef",           // dash for a digit
		"{01234567-89ab-cdef-0123-456789abcdef}"[:Len],   // braces
		"01234567-89ab-cdef-0123-456789abcd\u00e9"[:Len], // non-ASCII
	} {
		if u, ok := Parse(s); ok || !u.IsZero() {
			t.Errorf("Parse(%q) = %s, %v; want rejected", s, u, ok)
		}
	}
	u, ok := Parse("0123ABCD-89ab-CDEF-0123-456789abcdef")
	if !ok || u.String() != "0123abcd-89ab-cdef-0123-456789abcdef" {
		t.Fatalf("upper-case hex: %s, %v", u, ok)
	}
}

// FuzzParse: whatever Parse accepts is the canonical form (in either
// case) and formats back to it; whatever it rejects is not.
func FuzzParse(f *testing.F) {
	f.Add("01234567-89ab-cdef-0123-456789abcdef")
	f.Add("0123456-789ab-cdef-0123-456789abcdef")
	f.Add(New().String())
	f.Fuzz(func(t *testing.T, s string) {
		u, ok := Parse(s)
		lower := strings.ToLower(s)
		canonical := len(s) == Len && regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`).MatchString(lower)
		if ok != canonical {
			t.Fatalf("Parse(%q) ok=%v, canonical=%v", s, ok, canonical)
		}
		if ok && u.String() != lower {
			t.Fatalf("Parse(%q) = %x, which formats as %s", s, u, u)
		}
	})
}

// FuzzParseLower: ParseLower accepts what Parse accepts and String
// writes back unchanged, and nothing else.
func FuzzParseLower(f *testing.F) {
	f.Add("01234567-89ab-cdef-0123-456789abcdef")
	f.Add("01234567-89AB-cdef-0123-456789abcdef")
	f.Add("0123456g-89ab-cdef-0123-456789abcdef")
	f.Add(New().String())
	f.Fuzz(func(t *testing.T, s string) {
		u, ok := ParseLower(s)
		pu, pok := Parse(s)
		want := pok && pu.String() == s
		if ok != want || (ok && u != pu) {
			t.Fatalf("ParseLower(%q) = %x, %v; Parse: %x, %v", s, u, ok, pu, pok)
		}
	})
}

// FuzzRoundTrip: every 16 bytes format to a form that parses back to
// them.
func FuzzRoundTrip(f *testing.F) {
	f.Add(uint64(0), uint64(0))
	f.Add(uint64(1)<<63, ^uint64(0))
	f.Fuzz(func(t *testing.T, x, y uint64) {
		var want UUID
		for i := range 8 {
			want[i], want[8+i] = byte(x>>(8*i)), byte(y>>(8*i))
		}
		got, ok := Parse(want.String())
		if !ok || got != want {
			t.Fatalf("%x formats as %s, which parses as %x, %v", want, want, got, ok)
		}
	})
}

// TestHashIsFNV1a pins the partition hash: it places every key of every
// log and snapshot written so far, so it must stay 64-bit FNV-1a.
func TestHashIsFNV1a(t *testing.T) {
	golden := map[string]uint64{
		"":          0xcbf29ce484222325,
		"a":         0xaf63dc4c8601ec8c,
		"event\x00": 0xdd6383cec6bafa2d,
		"j/default": 0xa337219036b95dbb,
		"q/default": 0x094747aa368a6f3a,
	}
	for s, want := range golden {
		ref := fnv.New64a()
		ref.Write([]byte(s))
		if ref.Sum64() != want {
			t.Fatalf("golden value for %q is wrong: fnv says %#x", s, ref.Sum64())
		}
		if got := Hash(s); got != ref.Sum64() {
			t.Errorf("Hash(%q) = %#x, FNV-1a %#x", s, got, ref.Sum64())
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		b := make([]byte, rng.IntN(64))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		ref := fnv.New64a()
		ref.Write(b)
		cut := rng.IntN(len(b) + 1)
		if Hash(string(b)) != ref.Sum64() || HashBytes(b) != ref.Sum64() || HashMore(Hash(string(b[:cut])), string(b[cut:])) != ref.Sum64() {
			t.Fatalf("hashes of %x disagree with FNV-1a %#x", b, ref.Sum64())
		}
	}
}
