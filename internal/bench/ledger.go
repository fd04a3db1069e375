package bench

import (
	"fmt"
	"slices"
)

// Limits of the seat key packing below; flags are checked against them.
const (
	maxGroups  = 1 << 20
	maxAreas   = 1 << 16
	maxGridDim = 1 << 12
)

// Ledger records every seat a server handed out, as a packed key per seat.
// Each worker owns one, so recording takes no lock; FindDoubleBookings
// merges them once the spike is over.
type Ledger struct {
	keys []uint64
}

// Add records that seat s of area of the group's event was reserved.
func (l *Ledger) Add(group, area int, s Seat) {
	l.keys = append(l.keys, packSeat(group, area, s))
}

// Len is the number of seats recorded.
func (l *Ledger) Len() int { return len(l.keys) }

func packSeat(group, area int, s Seat) uint64 {
	return uint64(group)<<40 | uint64(area)<<24 | uint64(s.Row)<<12 | uint64(s.Col)
}

func unpackSeat(k uint64) (group, area int, s Seat) {
	return int(k >> 40), int(k >> 24 & 0xffff), Seat{Row: int(k >> 12 & 0xfff), Col: int(k & 0xfff)}
}

// DoubleBooking is a seat the server gave to more than one reservation.
type DoubleBooking struct {
	Group int  `json:"group"`
	Area  int  `json:"area"`
	Seat  Seat `json:"seat"`
	Times int  `json:"times"`
}

func (d DoubleBooking) String() string {
	return fmt.Sprintf("group %d area %d seat row %d col %d reserved %d times",
		d.Group, d.Area, d.Seat.Row, d.Seat.Col, d.Times)
}

// FindDoubleBookings returns every seat recorded more than once across the
// ledgers. Sorting one merged slice keeps memory at 8 bytes per sold seat,
// where a map would cost several times that at a million seats.
func FindDoubleBookings(ledgers ...*Ledger) []DoubleBooking {
	n := 0
	for _, l := range ledgers {
		n += len(l.keys)
	}
	all := make([]uint64, 0, n)
	for _, l := range ledgers {
		all = append(all, l.keys...)
	}
	slices.Sort(all)
	var out []DoubleBooking
	for i := 0; i < len(all); {
		j := i + 1
		for j < len(all) && all[j] == all[i] {
			j++
		}
		if j-i > 1 {
			g, a, s := unpackSeat(all[i])
			out = append(out, DoubleBooking{Group: g, Area: a, Seat: s, Times: j - i})
		}
		i = j
	}
	return out
}

// checkRandomSeats says what is wrong, if anything, with the seats of a
// RESERVED RANDOM reservation of n seats: the peer's contract is n adjacent
// seats in one row inside the grid.
func checkRandomSeats(seats []Seat, n, rows, cols int) string {
	if len(seats) != n {
		return fmt.Sprintf("%d seats for a request of %d", len(seats), n)
	}
	lo, hi := seats[0].Col, seats[0].Col
	for i, s := range seats {
		if s.Row < 0 || s.Row >= rows || s.Col < 0 || s.Col >= cols {
			return fmt.Sprintf("seat row %d col %d outside the %dx%d grid", s.Row, s.Col, rows, cols)
		}
		if s.Row != seats[0].Row {
			return "seats in more than one row"
		}
		for _, t := range seats[:i] {
			if t == s {
				return fmt.Sprintf("seat row %d col %d listed twice", s.Row, s.Col)
			}
		}
		lo, hi = min(lo, s.Col), max(hi, s.Col)
	}
	if hi-lo != n-1 {
		return fmt.Sprintf("seats not adjacent (cols %d..%d for %d seats)", lo, hi, n)
	}
	return ""
}
