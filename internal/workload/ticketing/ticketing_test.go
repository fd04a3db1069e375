package ticketing

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/surge-run/surge/internal/engine"
)

func apply(m *Machine, cmd engine.Command) *Result {
	var fx engine.Effects
	in := engine.Input{Kind: engine.FromClient, Cmd: cmd}
	m.Apply(&in, &fx)
	return replyOf(&fx)
}

func replyOf(fx *engine.Effects) *Result { return fx.Replied().(*Result) }

func id(n int) [16]byte {
	var b [16]byte
	b[0], b[1], b[2] = byte(n), byte(n>>8), byte(n>>16)
	return b
}

// checkInvariants verifies that no seat belongs to two live reservations,
// that the bitset equals the union of live reservations' seats, and that
// the free counters equal the grid minus the live seats.
func checkInvariants(t *testing.T, m *Machine) {
	t.Helper()
	owner := map[areaKey]map[Seat][16]byte{}
	for _, r := range liveRecords(t, m) {
		if r.State != StateReserved {
			continue
		}
		k := areaKey{r.EventID, r.AreaID}
		if owner[k] == nil {
			owner[k] = map[Seat][16]byte{}
		}
		for _, s := range r.Seats {
			if o, dup := owner[k][s]; dup {
				t.Fatalf("seat %v of %v given to %x and %x", s, k, o, r.ID)
			}
			owner[k][s] = r.ID
		}
	}
	for k, a := range m.areas {
		live := owner[k]
		total := a.def.RowCount * a.def.ColCount
		if a.free != total-len(live) {
			t.Fatalf("area %v: free=%d, want %d-%d", k, a.free, total, len(live))
		}
		for r := 0; r < a.def.RowCount; r++ {
			rowLive := 0
			for c := 0; c < a.def.ColCount; c++ {
				_, isLive := live[Seat{int32(r), int32(c)}]
				if a.isTaken(r, c) != isLive {
					t.Fatalf("area %v seat %d,%d: bitset says %v, reservations say %v", k, r, c, a.isTaken(r, c), isLive)
				}
				if isLive {
					rowLive++
				}
			}
			if a.rowFreeAt(r) != a.def.ColCount-rowLive {
				t.Fatalf("area %v row %d: rowFree=%d want %d", k, r, a.rowFreeAt(r), a.def.ColCount-rowLive)
			}
		}
	}
}

// liveRecords returns every stored record, checking the store's index,
// live count and idempotency map against the slab.
func liveRecords(t *testing.T, m *Machine) []Reservation {
	t.Helper()
	var out []Reservation
	s := &m.recs
	for i := range s.recs.n {
		rec := s.recs.at(i)
		if rec.flags&dead != 0 {
			if _, ok := s.index[rec.id]; ok {
				t.Fatalf("purged record %x is still in the index", rec.id)
			}
			continue
		}
		if slot, ok := s.index[rec.id]; !ok || slot != i {
			t.Fatalf("record %x in slot %d, index says %d %v", rec.id, i, slot, ok)
		}
		out = append(out, s.reservation(i))
	}
	if len(out) != s.live || len(out) != len(s.index) {
		t.Fatalf("%d live records, count %d, index %d", len(out), s.live, len(s.index))
	}
	for k, rid := range s.idem {
		slot, ok := s.index[rid]
		if !ok || s.reservation(slot).IdemKey != k.key || s.reservation(slot).UserID != k.user {
			t.Fatalf("idempotency key %q of %q names record %x, which does not carry it", k.key, k.user, rid)
		}
	}
	return out
}

func newTestMachine(areas ...AreaDef) *Machine {
	m := NewMachine()
	apply(m, &CreateEvent{Def: EventDef{EventName: "ev", Areas: areas}})
	for _, a := range areas {
		apply(m, &CreateArea{EventID: "ev", Area: a})
	}
	return m
}

// TestPropertyNoDoubleBooking drives random interleavings of RANDOM and
// SELF_PICK reservations and cancellations, with and without idempotency
// keys, and checks the invariants after every step. It also checks that
// replaying the logged commands, restoring a snapshot and encoding a fork
// give the same state.
func TestPropertyNoDoubleBooking(t *testing.T) {
	for seed := uint64(1); seed <= 40; seed++ {
		rng := rand.New(rand.NewPCG(seed, 99))
		areas := []AreaDef{{AreaID: "a", RowCount: 1 + rng.IntN(5), ColCount: 1 + rng.IntN(8)}, {AreaID: "b", RowCount: 3, ColCount: 3}}
		h := newHarness(t, areas...)
		var issued [][16]byte
		for step := 0; step < 300; step++ {
			var cmd engine.Command
			switch k := rng.IntN(10); {
			case k < 4:
				c := &Reserve{ID: id(step + 1), UserID: "u", EventID: "ev", AreaID: []string{"a", "b", "zz"}[rng.IntN(3)], Type: TypeRandom, NumOfSeats: int32(rng.IntN(5))}
				if rng.IntN(4) == 0 {
					c.IdemKey = []string{"k1", "k2"}[rng.IntN(2)]
				}
				cmd = c
			case k < 7:
				c := &Reserve{ID: id(step + 1), UserID: "u", EventID: "ev", AreaID: "a", Type: TypeSelfPick, Strict: rng.IntN(2) == 0}
				for range 1 + rng.IntN(3) {
					c.Seats = append(c.Seats, Seat{int32(rng.IntN(areas[0].RowCount + 1)), int32(rng.IntN(areas[0].ColCount + 1))})
				}
				cmd = c
			default:
				if len(issued) == 0 {
					continue
				}
				cmd = &Cancel{ID: issued[rng.IntN(len(issued))]}
			}
			before := h.m().AppendSnapshot(nil)
			logged := len(h.Log[0])
			res := h.Client("", cmd)
			// The harness logs a client command unless it declared
			// Unchanged (and it fails the test if one did and then
			// set a timer or notified).
			unchanged := len(h.Log[0]) == logged
			if unchanged && !bytes.Equal(before, h.m().AppendSnapshot(nil)) {
				t.Fatalf("seed %d step %d: %T declared Unchanged but changed the state", seed, step, cmd)
			}
			if (res.Outcome == OK) == unchanged {
				t.Fatalf("seed %d step %d: outcome %d with Unchanged=%v", seed, step, res.Outcome, unchanged)
			}
			if rc, ok := cmd.(*Reserve); ok && res.Outcome == OK {
				issued = append(issued, rc.ID)
				if res.Res.State == StateReserved && rc.Type == TypeRandom {
					if len(res.Res.Seats) != int(rc.NumOfSeats) {
						t.Fatalf("seed %d: RANDOM %d got %d seats", seed, rc.NumOfSeats, len(res.Res.Seats))
					}
					for i, s := range res.Res.Seats {
						if s.Row != res.Res.Seats[0].Row || int(s.Col) != int(res.Res.Seats[0].Col)+i {
							t.Fatalf("seed %d: RANDOM seats not adjacent in one row: %v", seed, res.Res.Seats)
						}
					}
				}
			}
			checkInvariants(t, h.m())
		}
		// Replaying the logged commands from an empty state, and
		// restoring a snapshot, give the same bytes.
		h.CheckReplay()
		checkInvariants(t, h.m()) // the restored machine
	}
}

func TestRandomFirstFit(t *testing.T) {
	m := newTestMachine(AreaDef{AreaID: "a", RowCount: 2, ColCount: 4})
	want := [][]Seat{
		{{0, 0}, {0, 1}, {0, 2}},
		{{1, 0}, {1, 1}},
		{{0, 3}},
	}
	for i, n := range []int32{3, 2, 1} {
		r := apply(m, &Reserve{ID: id(i + 1), EventID: "ev", AreaID: "a", Type: TypeRandom, NumOfSeats: n})
		if r.Res.State != StateReserved || len(r.Res.Seats) != len(want[i]) {
			t.Fatalf("reservation %d: %+v", i, r.Res)
		}
		for j := range want[i] {
			if r.Res.Seats[j] != want[i][j] {
				t.Fatalf("reservation %d: seats %v, want %v", i, r.Res.Seats, want[i])
			}
		}
	}
	r := apply(m, &Reserve{ID: id(9), EventID: "ev", AreaID: "a", Type: TypeRandom, NumOfSeats: 3})
	if r.Res.State != StateFailed || r.Res.FailedReason() != "no 3 continuous seats are available" {
		t.Fatalf("want FAILED no 3 continuous, got %+v %q", r.Res, r.Res.FailedReason())
	}
}

func TestFailureReasons(t *testing.T) {
	m := newTestMachine(AreaDef{AreaID: "a", RowCount: 1, ColCount: 2})
	cases := []struct {
		cmd  *Reserve
		want string
	}{
		{&Reserve{EventID: "ev", AreaID: "a", Type: TypeRandom, NumOfSeats: 0}, "invalid argument: numOfSeats must be at least 1, got 0"},
		{&Reserve{EventID: "ev", AreaID: "a", Type: "BEST"}, `invalid type "BEST": must be RANDOM or SELF_PICK`},
		{&Reserve{EventID: "ev", AreaID: "x", Type: TypeRandom, NumOfSeats: 1}, `invalid event/area: event "ev" has no area "x"`},
		{&Reserve{EventID: "ev", AreaID: "a", Type: TypeSelfPick, Seats: []Seat{{0, 2}}}, "invalid seat: row 0 col 2 is outside the area"},
		{&Reserve{EventID: "ev", AreaID: "a", Type: TypeSelfPick, Seats: []Seat{{0, 1}, {0, 1}}}, "invalid seat: row 0 col 1 is listed twice"},
		{&Reserve{EventID: "ev", AreaID: "a", Type: TypeSelfPick, Seats: []Seat{{0, 1}}}, ""},
		{&Reserve{EventID: "ev", AreaID: "a", Type: TypeSelfPick, Seats: []Seat{{0, 0}, {0, 1}}}, "seat row 0 col 1 is not available"},
		{&Reserve{EventID: "ev", AreaID: "a", Type: TypeRandom, NumOfSeats: 1}, ""},
		{&Reserve{EventID: "ev", AreaID: "a", Type: TypeRandom, NumOfSeats: 1}, "the area is sold out"},
	}
	for i, c := range cases {
		c.cmd.ID = id(i + 1)
		r := apply(m, c.cmd)
		if got := r.Res.FailedReason(); got != c.want {
			t.Errorf("case %d: reason %q, want %q", i, got, c.want)
		}
	}
	checkInvariants(t, m)
}

func TestIdempotencyKey(t *testing.T) {
	m := newTestMachine(AreaDef{AreaID: "a", RowCount: 1, ColCount: 10})
	first := apply(m, &Reserve{ID: id(1), UserID: "u", EventID: "ev", AreaID: "a", Type: TypeRandom, NumOfSeats: 2, IdemKey: "k"})
	again := apply(m, &Reserve{ID: id(2), UserID: "u", EventID: "ev", AreaID: "a", Type: TypeRandom, NumOfSeats: 2, IdemKey: "k"})
	if again.Outcome != Replayed || again.Res.ID != first.Res.ID {
		t.Fatalf("retry with the same key: %+v", again)
	}
	if m.areas[areaKey{"ev", "a"}].free != 8 {
		t.Fatal("retry reserved again")
	}
	other := apply(m, &Reserve{ID: id(3), UserID: "u", EventID: "ev", AreaID: "a", Type: TypeRandom, NumOfSeats: 3, IdemKey: "k"})
	if other.Outcome != Conflict {
		t.Fatalf("key reused with a different request: %+v", other)
	}
	otherUser := apply(m, &Reserve{ID: id(4), UserID: "v", EventID: "ev", AreaID: "a", Type: TypeRandom, NumOfSeats: 2, IdemKey: "k"})
	if otherUser.Outcome != OK || otherUser.Res.State != StateReserved {
		t.Fatalf("same key, other user: %+v", otherUser)
	}
}

func TestCancelFreesSeats(t *testing.T) {
	m := newTestMachine(AreaDef{AreaID: "a", RowCount: 1, ColCount: 2})
	r := apply(m, &Reserve{ID: id(1), EventID: "ev", AreaID: "a", Type: TypeRandom, NumOfSeats: 2})
	if r.Res.State != StateReserved {
		t.Fatal(r.Res.FailedReason())
	}
	if c := apply(m, &Cancel{ID: id(1)}); c.Outcome != OK || c.Res.State != StateCancelled {
		t.Fatalf("cancel: %+v", c)
	}
	if c := apply(m, &Cancel{ID: id(1)}); c.Outcome != Same {
		t.Fatalf("second cancel: %+v", c)
	}
	if c := apply(m, &Cancel{ID: id(7)}); c.Outcome != NotFound {
		t.Fatalf("cancel unknown: %+v", c)
	}
	r = apply(m, &Reserve{ID: id(2), EventID: "ev", AreaID: "a", Type: TypeRandom, NumOfSeats: 2})
	if r.Res.State != StateReserved {
		t.Fatal("seats were not freed")
	}
	checkInvariants(t, m)
}

func TestDecodeRejectsGarbage(t *testing.T) {
	m := NewMachine()
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		b := make([]byte, rng.IntN(40))
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		m.Decode(b) // must not panic
	}
	if err := m.Restore([]byte{1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f}); err == nil {
		t.Fatal("restore accepted a truncated snapshot")
	}
}

// TestForkedSnapshotIsTheStateAtFork encodes a forked snapshot on another
// goroutine while reservations and cancellations keep changing the state:
// the bytes must equal a synchronous snapshot taken at the fork. Run with
// -race, this also shows the encoder reads nothing the machine writes.
func TestForkedSnapshotIsTheStateAtFork(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	m := newTestMachine(AreaDef{AreaID: "a", RowCount: 30, ColCount: 30}, AreaDef{AreaID: "b", RowCount: 5, ColCount: 5})
	var ids [][16]byte
	step := 0
	mutate := func(n int) {
		for range n {
			step++
			if len(ids) > 0 && rng.IntN(3) == 0 {
				apply(m, &Cancel{ID: ids[rng.IntN(len(ids))]})
				continue
			}
			c := &Reserve{ID: id(step), UserID: "u", EventID: "ev", AreaID: []string{"a", "b"}[rng.IntN(2)], Type: TypeRandom, NumOfSeats: int32(1 + rng.IntN(3))}
			if rng.IntN(3) == 0 {
				c.IdemKey = fmt.Sprint("k", step)
			}
			if r := apply(m, c); r.Outcome == OK {
				ids = append(ids, c.ID)
			}
		}
	}
	for round := range 20 {
		mutate(100)
		want := m.AppendSnapshot(nil)
		encode := m.ForkSnapshot()
		done := make(chan []byte)
		go func() { done <- encode(nil) }()
		mutate(100)
		if got := <-done; !bytes.Equal(got, want) {
			t.Fatalf("round %d: forked snapshot differs from the state at the fork", round)
		}
		checkInvariants(t, m)
	}
}

// TestRandomOverTheLimitFails: the API refuses more than
// MaxSeatsPerRequest seats before logging, but the rule holds in the
// machine too, so a record's seat run always fits what a snapshot restores
// (a 150-seat run used to come back from a snapshot as no seats at (0, 0),
// and cancelling it then freed a seat someone else held).
func TestRandomOverTheLimitFails(t *testing.T) {
	m := newTestMachine(AreaDef{AreaID: "a", RowCount: 1, ColCount: 500})
	res := apply(m, &Reserve{ID: id(1), UserID: "u", EventID: "ev", AreaID: "a", Type: TypeRandom, NumOfSeats: MaxSeatsPerRequest + 50})
	if res.Outcome != OK || res.Res.State != StateFailed || res.Res.Reason != ReasonTooMany || len(res.Res.Seats) != 0 {
		t.Fatalf("got %+v", res)
	}
	if !strings.Contains(res.Res.FailedReason(), "at most 100") {
		t.Fatalf("reason %q", res.Res.FailedReason())
	}
	if a := m.areas[areaKey{"ev", "a"}]; a.free != 500 {
		t.Fatalf("%d seats free, want 500", a.free)
	}
	restored := NewMachine()
	if err := restored.Restore(m.AppendSnapshot(nil)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(restored.AppendSnapshot(nil), m.AppendSnapshot(nil)) {
		t.Fatal("snapshot round trip differs")
	}
}
