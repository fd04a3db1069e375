package ticketing

import (
	"math"

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
		key, ok := p.PlainString()
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

// str reads a plain string (jsonscan's PlainString): anything else
// (escapes, control bytes, DEL, non-ASCII) is left to the fallback,
// which also runs checkStrings, so a body the fast path accepts needs
// no further check.
func (p *fastParser) str() (string, bool) {
	b, ok := p.PlainString()
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
