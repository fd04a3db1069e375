package bench

import "testing"

func TestFindDoubleBookings(t *testing.T) {
	var a, b Ledger
	a.Add(0, 3, Seat{Row: 1, Col: 2})
	a.Add(0, 3, Seat{Row: 1, Col: 3})
	b.Add(1, 3, Seat{Row: 1, Col: 2}) // same seat, other group's event: fine
	b.Add(0, 4, Seat{Row: 1, Col: 2}) // same seat, other area: fine
	if d := FindDoubleBookings(&a, &b); len(d) != 0 {
		t.Fatalf("false double booking: %v", d)
	}
	b.Add(0, 3, Seat{Row: 1, Col: 3})
	b.Add(0, 3, Seat{Row: 1, Col: 3})
	d := FindDoubleBookings(&a, &b)
	want := DoubleBooking{Group: 0, Area: 3, Seat: Seat{Row: 1, Col: 3}, Times: 3}
	if len(d) != 1 || d[0] != want {
		t.Fatalf("got %v, want [%v]", d, want)
	}
}

func TestPackSeatRoundTrip(t *testing.T) {
	for _, c := range []struct{ g, a, r, col int }{{0, 0, 0, 0}, {maxGroups - 1, maxAreas - 1, maxGridDim - 1, maxGridDim - 1}, {5, 79, 19, 19}} {
		g, a, s := unpackSeat(packSeat(c.g, c.a, Seat{Row: c.r, Col: c.col}))
		if g != c.g || a != c.a || s != (Seat{Row: c.r, Col: c.col}) {
			t.Fatalf("%v: got %d %d %v", c, g, a, s)
		}
	}
}

func TestCheckRandomSeats(t *testing.T) {
	row := func(r int, cols ...int) []Seat {
		var s []Seat
		for _, c := range cols {
			s = append(s, Seat{Row: r, Col: c})
		}
		return s
	}
	for _, c := range []struct {
		seats []Seat
		n     int
		ok    bool
	}{
		{row(0, 0), 1, true},
		{row(3, 4, 5, 6, 7), 4, true},
		{row(3, 7, 5, 6), 3, true}, // order does not matter
		{row(3, 4, 5), 3, false},   // too few
		{row(3, 4, 6), 2, false},   // gap
		{row(3, 4, 4), 2, false},   // same seat twice
		{row(20, 0), 1, false},     // outside the grid
		{row(0, 19, 20), 2, false}, // outside the grid
		{append(row(0, 1), row(1, 2)...), 2, false},
	} {
		why := checkRandomSeats(c.seats, c.n, 20, 20)
		if (why == "") != c.ok {
			t.Errorf("%v for %d: got %q, want ok=%v", c.seats, c.n, why, c.ok)
		}
	}
}
