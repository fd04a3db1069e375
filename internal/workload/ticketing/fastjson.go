package ticketing

import "math"

// parseReserveFast decodes the common shape of a reservation body without
// reflection: an object whose keys are the known fields, with plain
// strings (no escapes), integers and a seats array of {row, col}. It
// returns false for anything else, and the caller falls back to
// encoding/json, which then decides (and words any error). So the fast
// path never accepts what encoding/json would reject, and never decodes a
// value differently (checked by a test against encoding/json).
func parseReserveFast(b []byte, out *reserveBody) bool {
	p := fastParser{b: b}
	p.ws()
	if !p.eat('{') {
		return false
	}
	p.ws()
	if p.eat('}') {
		return p.end()
	}
	for {
		p.ws()
		key, ok := p.raw()
		if !ok {
			return false
		}
		p.ws()
		if !p.eat(':') {
			return false
		}
		p.ws()
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
			if p.null() {
				break
			}
			out.NumOfSeats, ok = p.int(math.MinInt64, math.MaxInt64)
		case "seats":
			ok = p.seats(out)
		default:
			return false
		}
		if !ok {
			return false
		}
		p.ws()
		if p.eat(',') {
			continue
		}
		if p.eat('}') {
			return p.end()
		}
		return false
	}
}

type fastParser struct {
	b []byte
	i int
}

func (p *fastParser) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *fastParser) eat(c byte) bool {
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *fastParser) end() bool {
	p.ws()
	return p.i == len(p.b)
}

func (p *fastParser) null() bool {
	if len(p.b)-p.i >= 4 && string(p.b[p.i:p.i+4]) == "null" {
		p.i += 4
		return true
	}
	return false
}

// raw reads a string of printable ASCII without escapes and returns its
// bytes in place; anything else (escapes, control bytes, non-ASCII) is
// left to the fallback.
func (p *fastParser) raw() ([]byte, bool) {
	if !p.eat('"') {
		return nil, false
	}
	start := p.i
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			return p.b[start : p.i-1], true
		case c == '\\' || c < 0x20 || c >= 0x80:
			return nil, false
		}
		p.i++
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
	if p.null() {
		return old, true
	}
	return p.str()
}

// int reads an integer with no fraction or exponent within [lo, hi].
func (p *fastParser) int(lo, hi int64) (int64, bool) {
	neg := p.eat('-')
	start := p.i
	var v int64
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		if v > (math.MaxInt64-9)/10 {
			return 0, false
		}
		v = v*10 + int64(p.b[p.i]-'0')
		p.i++
	}
	n := p.i - start
	if n == 0 || (n > 1 && p.b[start] == '0') {
		return 0, false
	}
	if p.i < len(p.b) && (p.b[p.i] == '.' || p.b[p.i] == 'e' || p.b[p.i] == 'E') {
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
	if p.null() {
		out.Seats = out.Seats[:0]
		return true
	}
	if !p.eat('[') {
		return false
	}
	out.Seats = out.Seats[:0]
	p.ws()
	if p.eat(']') {
		return true
	}
	for {
		p.ws()
		if !p.eat('{') {
			return false
		}
		var s Seat
		p.ws()
		if !p.eat('}') {
			for {
				p.ws()
				key, ok := p.raw()
				if !ok {
					return false
				}
				p.ws()
				if !p.eat(':') {
					return false
				}
				p.ws()
				v, ok := p.int(math.MinInt32, math.MaxInt32)
				if !ok {
					return false
				}
				switch string(key) {
				case "row":
					s.Row = int32(v)
				case "col":
					s.Col = int32(v)
				default:
					return false
				}
				p.ws()
				if p.eat(',') {
					continue
				}
				if p.eat('}') {
					break
				}
				return false
			}
		}
		out.Seats = append(out.Seats, s)
		p.ws()
		if p.eat(',') {
			continue
		}
		return p.eat(']')
	}
}
