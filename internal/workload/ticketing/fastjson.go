package ticketing

import (
	"fmt"
	"math"
	"unicode/utf8"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/jsonscan"
)

// parseReserveFast decodes the common shape of a reservation body without
// reflection: an object whose keys are the known fields, with plain
// strings (no escapes), integers and a seats array of {row, col}. It
// returns false for anything else, and the caller falls back to
// encoding/json, which then decides (and words any error). So the fast
// path never accepts what encoding/json would reject, and never decodes a
// value differently (checked by a test against encoding/json).
func parseReserveFast(b []byte, out *reserveBody) bool {
	p := fastParser{jsonscan.Scanner{B: b}}
	ok := p.object(func(key []byte) bool {
		var ok bool
		switch string(key) {
		case "userId":
			out.UserID, ok = p.strValue(out.UserID)
		case "eventId":
			out.EventID, ok = p.strValue(out.EventID)
		case "areaId":
			out.AreaID, ok = p.strValue(out.AreaID)
		case "type":
			out.Type, ok = p.strValue(out.Type)
		case "numOfSeats":
			if p.Null() {
				return true
			}
			out.NumOfSeats, ok = p.int(math.MinInt64, math.MaxInt64)
		case "seats":
			ok = p.seats(out)
		}
		return ok
	})
	return ok && p.End()
}

type fastParser struct{ jsonscan.Scanner }

// object parses {"key": value, ...}; field is called with the scanner at
// each value and must consume it (or return false: unknown key, bad value).
func (p *fastParser) object(field func(key []byte) bool) bool {
	p.WS()
	if !p.Eat('{') {
		return false
	}
	p.WS()
	if p.Eat('}') {
		return true
	}
	for {
		p.WS()
		key, ok := p.raw()
		if !ok {
			return false
		}
		p.WS()
		if !p.Eat(':') {
			return false
		}
		p.WS()
		if !field(key) {
			return false
		}
		p.WS()
		if p.Eat(',') {
			continue
		}
		return p.Eat('}')
	}
}

// raw reads a string of printable ASCII without escapes and returns its
// bytes in place; anything else (escapes, control bytes, DEL, non-ASCII)
// is left to the fallback, which also runs checkStrings. So a body the
// fast path accepts needs no further check.
func (p *fastParser) raw() ([]byte, bool) {
	if !p.Eat('"') {
		return nil, false
	}
	start := p.I
	for p.I < len(p.B) {
		c := p.B[p.I]
		switch {
		case c == '"':
			p.I++
			return p.B[start : p.I-1], true
		case c == '\\' || c < 0x20 || c >= 0x7f:
			return nil, false
		}
		p.I++
	}
	return nil, false
}

func (p *fastParser) str() (string, bool) {
	b, ok := p.raw()
	if !ok {
		return "", false
	}
	switch string(b) { // the type field: no allocation for the usual values
	case TypeRandom:
		return TypeRandom, true
	case TypeSelfPick:
		return TypeSelfPick, true
	}
	return string(b), true
}

// strValue reads a string, or null (which leaves the field as it was, as
// encoding/json does).
func (p *fastParser) strValue(old string) (string, bool) {
	if p.Null() {
		return old, true
	}
	return p.str()
}

// int reads an integer with no fraction or exponent within [lo, hi].
func (p *fastParser) int(lo, hi int64) (int64, bool) {
	neg := p.Eat('-')
	start := p.I
	var v int64
	for p.I < len(p.B) && p.B[p.I] >= '0' && p.B[p.I] <= '9' {
		if v > (math.MaxInt64-9)/10 {
			return 0, false
		}
		v = v*10 + int64(p.B[p.I]-'0')
		p.I++
	}
	n := p.I - start
	if n == 0 || (n > 1 && p.B[start] == '0') {
		return 0, false
	}
	if p.I < len(p.B) && (p.B[p.I] == '.' || p.B[p.I] == 'e' || p.B[p.I] == 'E') {
		return 0, false
	}
	if neg {
		v = -v
	}
	if v < lo || v > hi {
		return 0, false
	}
	return v, true
}

func (p *fastParser) seats(out *reserveBody) bool {
	if p.Null() {
		out.Seats = out.Seats[:0]
		return true
	}
	if !p.Eat('[') {
		return false
	}
	out.Seats = out.Seats[:0]
	p.WS()
	if p.Eat(']') {
		return true
	}
	for {
		var s Seat
		ok := p.object(func(key []byte) bool {
			v, ok := p.int(math.MinInt32, math.MaxInt32)
			switch string(key) {
			case "row":
				s.Row = int32(v)
			case "col":
				s.Col = int32(v)
			default:
				return false
			}
			return ok
		})
		if !ok {
			return false
		}
		out.Seats = append(out.Seats, s)
		p.WS()
		if p.Eat(',') {
			continue
		}
		return p.Eat(']')
	}
}

// checkStrings walks the string literals of a JSON body and names the
// first one that holds invalid UTF-8 (encoding/json would silently turn it
// into U+FFFD), an escape for half of a surrogate pair (likewise), or a
// control character U+0000–U+001F or U+007F, raw or escaped. Every string
// in the body is held to this, names or not: none of the API's fields has
// a use for control characters, and a stored name must read back as sent.
// It never panics on any input, but only judges strings; the syntax is
// encoding/json's to check.
func checkStrings(b []byte) string {
	var key []byte // the last object key, to name the field
	for i := 0; i < len(b); i++ {
		if b[i] != '"' {
			continue
		}
		start := i + 1
		end, problem := scanString(b, start)
		j := end + 1
		for j < len(b) && (b[j] == ' ' || b[j] == '\t' || b[j] == '\n' || b[j] == '\r') {
			j++
		}
		isKey := j < len(b) && b[j] == ':'
		if problem != "" {
			if isKey {
				return "an object key " + problem
			}
			if key == nil {
				return "a string " + problem
			}
			return "field " + api.Quote(string(key)) + " " + problem
		}
		if isKey {
			key = b[start:end]
		}
		i = end
	}
	return ""
}

// scanString reads the string literal whose content starts at i and
// returns the index of its closing quote (or len(b)) and what is wrong
// with it, if anything.
func scanString(b []byte, i int) (end int, problem string) {
	for i < len(b) {
		c := b[i]
		switch {
		case c == '"':
			return i, problem
		case c == '\\':
			n, p := scanEscape(b, i)
			if problem == "" {
				problem = p
			}
			i += n
		case c < 0x20 || c == 0x7f:
			if problem == "" {
				problem = fmt.Sprintf("contains the control character U+%04X; names must be printable text", c)
			}
			i++
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size == 1 && problem == "" {
				problem = "is not valid UTF-8; send text as UTF-8"
			}
			i += size
		}
	}
	return len(b), problem
}

// scanEscape reads the escape at b[i] ('\\') and returns its length and
// what is wrong with what it stands for.
func scanEscape(b []byte, i int) (int, string) {
	if i+1 >= len(b) {
		return 1, ""
	}
	switch b[i+1] {
	case 'b', 'f', 'n', 'r', 't':
		return 2, fmt.Sprintf("contains a control character (\\%c); names must be printable text", b[i+1])
	case 'u':
	default:
		return 2, "" // \" \\ \/ or a syntax error encoding/json reports
	}
	r, ok := hex4(b, i+2)
	if !ok {
		return 2, ""
	}
	switch {
	case r < 0x20 || r == 0x7f:
		return 6, fmt.Sprintf("contains the control character U+%04X; names must be printable text", r)
	case 0xdc00 <= r && r <= 0xdfff:
		return 6, "contains half of a UTF-16 surrogate pair, which is not a character; send text as UTF-8"
	case 0xd800 <= r && r <= 0xdbff:
		if i+7 < len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
			if lo, ok := hex4(b, i+8); ok && 0xdc00 <= lo && lo <= 0xdfff {
				return 12, ""
			}
		}
		return 6, "contains half of a UTF-16 surrogate pair, which is not a character; send text as UTF-8"
	}
	return 6, ""
}

func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		v, ok := unhex(c)
		if !ok {
			return 0, false
		}
		r = r<<4 | rune(v)
	}
	return r, true
}

// checkText applies checkStrings' rule to a decoded string (a path value).
func checkText(s string) string {
	for i, r := range s {
		switch {
		case r == utf8.RuneError:
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				return "is not valid UTF-8; send text as UTF-8"
			}
		case r < 0x20 || r == 0x7f:
			return fmt.Sprintf("contains the control character U+%04X; names must be printable text", r)
		}
	}
	return ""
}
