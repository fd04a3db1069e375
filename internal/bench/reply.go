package bench

import (
	"bytes"
	"errors"

	"github.com/surge-run/surge/internal/jsonscan"
)

// Seat is one seat of an area grid, 0-based like the API.
type Seat struct {
	Row int `json:"row"`
	Col int `json:"col"`
}

// reservationReply holds the fields of a reservation JSON the generator
// checks. It is reused across requests: the byte slices point into the
// worker's response buffer and are only valid until the next request.
type reservationReply struct {
	state        []byte
	areaID       []byte
	failedReason []byte
	seats        []Seat
}

var (
	stateReserved = []byte("RESERVED")
	stateFailed   = []byte("FAILED")

	keyState        = []byte("state")
	keyAreaID       = []byte("areaId")
	keyFailedReason = []byte("failedReason")
	keySeats        = []byte("seats")
	keyRow          = []byte("row")
	keyCol          = []byte("col")

	errMalformed = errors.New("malformed JSON reply")
)

// maxJSONDepth bounds recursion when skipping fields we do not read, so a
// hostile or broken server cannot blow the generator's stack.
const maxJSONDepth = 32

// parseReservation reads a reservation object without allocating: the
// generator parses one per reservation, and on a 2-core machine every
// microsecond it spends is taken from the server it measures.
// encoding/json would cost several allocations and reflection per reply.
func parseReservation(b []byte, r *reservationReply) error {
	r.state, r.areaID, r.failedReason = nil, nil, nil
	r.seats = r.seats[:0]
	p := jsonParser{jsonscan.Scanner{B: b}}
	p.WS()
	if !p.Eat('{') {
		return errMalformed
	}
	p.WS()
	if p.Eat('}') {
		return p.end()
	}
	for {
		key, ok := p.RawString()
		if !ok {
			return errMalformed
		}
		p.WS()
		if !p.Eat(':') {
			return errMalformed
		}
		p.WS()
		switch {
		case bytes.Equal(key, keyState):
			ok = p.strOrNull(&r.state)
		case bytes.Equal(key, keyAreaID):
			ok = p.strOrNull(&r.areaID)
		case bytes.Equal(key, keyFailedReason):
			ok = p.strOrNull(&r.failedReason)
		case bytes.Equal(key, keySeats):
			ok = p.seats(&r.seats)
		default:
			ok = p.Skip(0, maxJSONDepth)
		}
		if !ok {
			return errMalformed
		}
		p.WS()
		if p.Eat(',') {
			p.WS()
			continue
		}
		if p.Eat('}') {
			return p.end()
		}
		return errMalformed
	}
}

type jsonParser struct{ jsonscan.Scanner }

func (p *jsonParser) end() error {
	if !p.End() {
		return errMalformed
	}
	return nil
}

func (p *jsonParser) strOrNull(dst *[]byte) bool {
	if p.Lit("null") {
		*dst = nil
		return true
	}
	s, ok := p.RawString()
	*dst = s
	return ok
}

// int reads a non-negative integer small enough for a seat coordinate;
// anything else (negative, fractional, huge) is not a seat the generator
// can have been given.
func (p *jsonParser) int() (int, bool) {
	start, n := p.I, 0
	for p.I < len(p.B) && p.B[p.I] >= '0' && p.B[p.I] <= '9' {
		n = n*10 + int(p.B[p.I]-'0')
		p.I++
		if p.I-start > 9 {
			return 0, false
		}
	}
	if p.I == start || (p.I < len(p.B) && jsonscan.IsNumberByte(p.B[p.I])) {
		return 0, false
	}
	return n, true
}

func (p *jsonParser) seats(dst *[]Seat) bool {
	if p.Lit("null") {
		return true
	}
	if !p.Eat('[') {
		return false
	}
	p.WS()
	if p.Eat(']') {
		return true
	}
	for {
		s, ok := p.seat()
		if !ok {
			return false
		}
		*dst = append(*dst, s)
		p.WS()
		if p.Eat(',') {
			p.WS()
			continue
		}
		return p.Eat(']')
	}
}

func (p *jsonParser) seat() (Seat, bool) {
	s := Seat{Row: -1, Col: -1}
	if !p.Eat('{') {
		return s, false
	}
	p.WS()
	if p.Eat('}') {
		return s, false
	}
	for {
		key, ok := p.RawString()
		if !ok {
			return s, false
		}
		p.WS()
		if !p.Eat(':') {
			return s, false
		}
		p.WS()
		switch {
		case bytes.Equal(key, keyRow):
			s.Row, ok = p.int()
		case bytes.Equal(key, keyCol):
			s.Col, ok = p.int()
		default:
			ok = p.Skip(1, maxJSONDepth)
		}
		if !ok {
			return s, false
		}
		p.WS()
		if p.Eat(',') {
			p.WS()
			continue
		}
		if !p.Eat('}') || s.Row < 0 || s.Col < 0 {
			return s, false
		}
		return s, true
	}
}
