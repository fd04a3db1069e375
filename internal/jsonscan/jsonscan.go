// Package jsonscan has the byte-level primitives of the small hand-written
// JSON parsers on hot paths (the server's reservation body, the load
// generator's replies), where encoding/json's reflection costs more than
// the rest of the request, and the one scanner of string literals that
// the API's text checks use (String). Every hand-written JSON string
// scanner of the project is here.
package jsonscan

import (
	"bytes"
	"unicode/utf8"
)

// Scanner walks B from I.
type Scanner struct {
	B []byte
	I int
}

// WS skips JSON whitespace.
func (s *Scanner) WS() {
	for s.I < len(s.B) {
		switch s.B[s.I] {
		case ' ', '\t', '\n', '\r':
			s.I++
		default:
			return
		}
	}
}

// Eat consumes c if it is next.
func (s *Scanner) Eat(c byte) bool {
	if s.I < len(s.B) && s.B[s.I] == c {
		s.I++
		return true
	}
	return false
}

// End reports whether only whitespace is left.
func (s *Scanner) End() bool {
	s.WS()
	return s.I == len(s.B)
}

// Null consumes a null literal if it is next.
func (s *Scanner) Null() bool {
	if len(s.B)-s.I >= 4 && string(s.B[s.I:s.I+4]) == "null" {
		s.I += 4
		return true
	}
	return false
}

// Lit consumes the literal lit (true, false, null) if it is next.
func (s *Scanner) Lit(lit string) bool {
	if len(s.B)-s.I >= len(lit) && string(s.B[s.I:s.I+len(lit)]) == lit {
		s.I += len(lit)
		return true
	}
	return false
}

// PlainString reads a string of printable ASCII without escapes and
// returns its bytes in place. Anything else (an escape, a control byte,
// DEL, non-ASCII) is false, for a caller that then falls back to a full
// decoder, so what it accepts needs no further check.
func (s *Scanner) PlainString() ([]byte, bool) {
	if !s.Eat('"') {
		return nil, false
	}
	start := s.I
	for s.I < len(s.B) {
		c := s.B[s.I]
		switch {
		case c == '"':
			s.I++
			return s.B[start : s.I-1], true
		case c == '\\' || c < 0x20 || c >= 0x7f:
			return nil, false
		}
		s.I++
	}
	return nil, false
}

// RawString reads a string and returns the bytes between its quotes,
// escapes left as they are (for a caller comparing values that never
// need unescaping); a raw control byte is false.
func (s *Scanner) RawString() ([]byte, bool) {
	if !s.Eat('"') {
		return nil, false
	}
	start := s.I
	for s.I < len(s.B) {
		switch c := s.B[s.I]; {
		case c == '\\':
			s.I += 2
		case c == '"':
			v := s.B[start:s.I]
			s.I++
			return v, true
		case c < 0x20:
			return nil, false
		default:
			s.I++
		}
	}
	return nil, false
}

// IsNumberByte reports whether c can be part of a JSON number.
func IsNumberByte(c byte) bool {
	return c >= '0' && c <= '9' || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E'
}

// Skip passes over any JSON value found depth levels deep, refusing one
// that nests deeper than maxDepth (so a hostile reply cannot exhaust the
// stack). Numbers are taken loosely (a run of number bytes): it skips
// what the caller does not read, it does not validate.
func (s *Scanner) Skip(depth, maxDepth int) bool {
	if depth > maxDepth || s.I >= len(s.B) {
		return false
	}
	switch c := s.B[s.I]; c {
	case '"':
		_, ok := s.RawString()
		return ok
	case '{', '[':
		return s.skipComposite(c, depth, maxDepth)
	case 't':
		return s.Lit("true")
	case 'f':
		return s.Lit("false")
	case 'n':
		return s.Lit("null")
	default:
		start := s.I
		for s.I < len(s.B) && IsNumberByte(s.B[s.I]) {
			s.I++
		}
		return s.I > start
	}
}

func (s *Scanner) skipComposite(open byte, depth, maxDepth int) bool {
	closer := byte('}')
	if open == '[' {
		closer = ']'
	}
	s.I++
	s.WS()
	if s.Eat(closer) {
		return true
	}
	for {
		if open == '{' {
			if _, ok := s.RawString(); !ok {
				return false
			}
			s.WS()
			if !s.Eat(':') {
				return false
			}
			s.WS()
		}
		if !s.Skip(depth+1, maxDepth) {
			return false
		}
		s.WS()
		if s.Eat(',') {
			s.WS()
			continue
		}
		return s.Eat(closer)
	}
}

// Field returns the value of the first string field name in a JSON
// object, or nil: a look-up for flat replies whose field names do not
// recur in nested objects. The value is the raw bytes up to the next
// quote (values it is used for hold no escapes).
func Field(b []byte, name string) []byte {
	key := `"` + name + `"`
	for off := 0; ; {
		i := bytes.Index(b[off:], []byte(key))
		if i < 0 {
			return nil
		}
		s := Scanner{B: b, I: off + i + len(key)}
		s.WS()
		if !s.Eat(':') {
			off = s.I
			continue
		}
		s.WS()
		if !s.Eat('"') {
			return nil
		}
		end := bytes.IndexByte(b[s.I:], '"')
		if end < 0 {
			return nil
		}
		return b[s.I : s.I+end]
	}
}

// FlawKind is what is wrong with a string literal's text (String).
type FlawKind uint8

const (
	// NoFlaw: the text is valid UTF-8 without control characters.
	NoFlaw FlawKind = iota
	// Control: a control character, raw or as a \u escape (Flaw.R).
	Control
	// EscapedControl: one of \b \f \n \r \t (Flaw.R is the letter).
	EscapedControl
	// BadUTF8: bytes that are not UTF-8.
	BadUTF8
	// Surrogate: a \u escape of half a UTF-16 surrogate pair.
	Surrogate
)

// Flaw is the first thing wrong with a string literal's text.
type Flaw struct {
	Kind FlawKind
	R    rune
}

// String scans the string literal whose text starts at b[i] (just after
// its opening quote) and returns the index of its closing quote (len(b)
// if there is none) and its first flaw. It does not check escapes beyond
// what makes a flaw: a JSON decoder judges the syntax.
func String(b []byte, i int) (end int, flaw Flaw) {
	for i < len(b) {
		c := b[i]
		switch {
		case c == '"':
			return i, flaw
		case c == '\\':
			n, f := escape(b, i)
			if flaw.Kind == NoFlaw {
				flaw = f
			}
			i += n
		case c < 0x20 || c == 0x7f:
			if flaw.Kind == NoFlaw {
				flaw = Flaw{Control, rune(c)}
			}
			i++
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size == 1 && flaw.Kind == NoFlaw {
				flaw = Flaw{Kind: BadUTF8}
			}
			i += size
		}
	}
	return len(b), flaw
}

// escape measures the escape at b[i] and says what is wrong with the
// character it stands for.
func escape(b []byte, i int) (int, Flaw) {
	if i+1 >= len(b) {
		return 1, Flaw{}
	}
	switch b[i+1] {
	case 'b', 'f', 'n', 'r', 't':
		return 2, Flaw{EscapedControl, rune(b[i+1])}
	case 'u':
	default:
		return 2, Flaw{}
	}
	r, ok := Hex4(b, i+2)
	if !ok {
		return 2, Flaw{}
	}
	switch {
	case r < 0x20 || r == 0x7f:
		return 6, Flaw{Control, r}
	case 0xdc00 <= r && r <= 0xdfff:
		return 6, Flaw{Kind: Surrogate}
	case 0xd800 <= r && r <= 0xdbff:
		if i+7 < len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
			if lo, ok := Hex4(b, i+8); ok && 0xdc00 <= lo && lo <= 0xdfff {
				return 12, Flaw{}
			}
		}
		return 6, Flaw{Kind: Surrogate}
	}
	return 6, Flaw{}
}

// Hex4 reads the four hex digits of a \u escape at b[i:].
func Hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		var v byte
		switch {
		case '0' <= c && c <= '9':
			v = c - '0'
		case 'a' <= c && c <= 'f':
			v = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			v = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(v)
	}
	return r, true
}
