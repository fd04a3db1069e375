package ticketing

import (
	"bytes"
	"math/bits"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// eagerArea is the area as it was before it became lazy: every seat's state
// allocated up front. It is the model the lazy area must agree with.
type eagerArea struct {
	def     AreaDef
	free    int
	rowFree []int32
	taken   []uint64
}

func newEagerArea(def AreaDef) *eagerArea {
	n := def.RowCount * def.ColCount
	a := &eagerArea{def: def, free: n, rowFree: make([]int32, def.RowCount), taken: make([]uint64, (n+63)/64)}
	for r := range a.rowFree {
		a.rowFree[r] = int32(def.ColCount)
	}
	return a
}

func (a *eagerArea) bit(r, c int) int { return r*a.def.ColCount + c }
func (a *eagerArea) isTaken(r, c int) bool {
	i := a.bit(r, c)
	return a.taken[i>>6]&(1<<(i&63)) != 0
}
func (a *eagerArea) set(r, c int, taken bool) {
	i := a.bit(r, c)
	if taken {
		a.taken[i>>6] |= 1 << (i & 63)
		a.rowFree[r]--
		a.free--
	} else {
		a.taken[i>>6] &^= 1 << (i & 63)
		a.rowFree[r]++
		a.free++
	}
}
func (a *eagerArea) firstFit(n int) (row, col int, ok bool) {
	for r := 0; r < a.def.RowCount; r++ {
		if int(a.rowFree[r]) < n {
			continue
		}
		run := 0
		for c := 0; c < a.def.ColCount; c++ {
			if a.isTaken(r, c) {
				run = 0
				continue
			}
			run++
			if run == n {
				return r, c - n + 1, true
			}
		}
	}
	return 0, 0, false
}
func (a *eagerArea) countTaken() int {
	n := 0
	for _, w := range a.taken {
		n += bits.OnesCount64(w)
	}
	return n
}

// TestLazyAreaAgreesWithEagerModel runs random sequences of RANDOM
// reservations (first fit), picked seats and cancellations against the
// lazy area and the eager model, and requires the same answer from
// firstFit, isTaken, the counters and countTaken after every step, and the
// same state after a snapshot round trip. Sequences often free every seat,
// so the lazy area also goes back to untouched and is touched again.
func TestLazyAreaAgreesWithEagerModel(t *testing.T) {
	for seed := uint64(1); seed <= 200; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		def := AreaDef{AreaID: "a", RowCount: 1 + rng.IntN(6), ColCount: 1 + rng.IntN(70)}
		lazy, model := newArea("ev", def), newEagerArea(def)
		var held [][]Seat
		for step := range 400 {
			switch k := rng.IntN(10); {
			case k < 5:
				n := 1 + rng.IntN(min(def.ColCount, 8)+1)
				r1, c1, ok1 := lazy.firstFit(n)
				r2, c2, ok2 := model.firstFit(n)
				if r1 != r2 || c1 != c2 || ok1 != ok2 {
					t.Fatalf("seed %d step %d: firstFit(%d) = %d,%d,%v; model %d,%d,%v", seed, step, n, r1, c1, ok1, r2, c2, ok2)
				}
				if ok1 {
					var seats []Seat
					for c := c1; c < c1+n; c++ {
						lazy.set(r1, c, true)
						model.set(r1, c, true)
						seats = append(seats, Seat{int32(r1), int32(c)})
					}
					held = append(held, seats)
				}
			case k < 7:
				r, c := rng.IntN(def.RowCount), rng.IntN(def.ColCount)
				if lazy.isTaken(r, c) != model.isTaken(r, c) {
					t.Fatalf("seed %d step %d: isTaken(%d,%d) differs", seed, step, r, c)
				}
				if !model.isTaken(r, c) {
					lazy.set(r, c, true)
					model.set(r, c, true)
					held = append(held, []Seat{{int32(r), int32(c)}})
				}
			default:
				if len(held) == 0 {
					continue
				}
				i := rng.IntN(len(held))
				for _, s := range held[i] {
					lazy.set(int(s.Row), int(s.Col), false)
					model.set(int(s.Row), int(s.Col), false)
				}
				held = append(held[:i], held[i+1:]...)
			}
			compareAreas(t, seed, step, lazy, model)
			if len(held) == 0 && lazy.taken != nil {
				t.Fatalf("seed %d step %d: every seat is free but the area keeps its seat state", seed, step)
			}
		}
		m := NewMachine()
		m.events["ev"] = &EventDef{EventName: "ev", Areas: []AreaDef{def}}
		m.areas[areaKey{"ev", "a"}] = lazy
		restored := NewMachine()
		if err := restored.Restore(m.AppendSnapshot(nil)); err != nil {
			t.Fatal(err)
		}
		compareAreas(t, seed, -1, restored.areas[areaKey{"ev", "a"}], model)
	}
}

func compareAreas(t *testing.T, seed uint64, step int, lazy *area, model *eagerArea) {
	t.Helper()
	if lazy.free != model.free || lazy.countTaken() != model.countTaken() {
		t.Fatalf("seed %d step %d: free %d taken %d; model %d %d", seed, step, lazy.free, lazy.countTaken(), model.free, model.countTaken())
	}
	for r := range lazy.def.RowCount {
		if lazy.rowFreeAt(r) != int(model.rowFree[r]) {
			t.Fatalf("seed %d step %d: row %d free %d; model %d", seed, step, r, lazy.rowFreeAt(r), model.rowFree[r])
		}
		for c := range lazy.def.ColCount {
			if lazy.isTaken(r, c) != model.isTaken(r, c) {
				t.Fatalf("seed %d step %d: seat %d,%d taken=%v; model %v", seed, step, r, c, lazy.isTaken(r, c), model.isTaken(r, c))
			}
		}
	}
}

// TestUntouchedSeatsCostNothing declares the amplification event
// (1,000 areas of 100 x 1,000 seats): before anyone reserves, the areas
// hold no seat state and the snapshot is a few bytes per area, not the
// 12.5 MB of bitsets it used to be; one reservation touches only its area.
func TestUntouchedSeatsCostNothing(t *testing.T) {
	var areas []AreaDef
	for i := range MaxAreasPerEvent {
		areas = append(areas, AreaDef{AreaID: "area-" + string(rune('A'+i%26)) + string(rune('A'+i/26)), Price: 1, RowCount: 100, ColCount: 1000})
	}
	m := newTestMachine(areas...)
	for k, a := range m.areas {
		if a.taken != nil || a.rowFree != nil {
			t.Fatalf("area %v holds seat state before any seat was taken", k)
		}
	}
	snap := m.AppendSnapshot(nil)
	if len(snap) > 100*len(areas) {
		t.Fatalf("snapshot of untouched areas is %d bytes, want at most %d", len(snap), 100*len(areas))
	}
	if info := m.Query(GetArea{EventID: "ev", AreaID: areas[3].AreaID}).(AreaInfo); info.Available != 100_000 || info.Taken != 0 {
		t.Fatalf("untouched area: %+v", info)
	}
	// Restoring it allocates no seat state either (the bitsets would be
	// 12.5 MB, even if dropped at once).
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := NewMachine().Restore(snap); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4<<20 {
		t.Fatalf("restoring 1,000 untouched areas allocated %d bytes", alloc)
	}
	r := apply(m, &Reserve{ID: id(1), EventID: "ev", AreaID: areas[3].AreaID, Type: TypeRandom, NumOfSeats: 4})
	if r.Res.State != StateReserved {
		t.Fatalf("reserve: %+v", r.Res)
	}
	touched := 0
	for _, a := range m.areas {
		if a.taken != nil {
			touched++
		}
	}
	if touched != 1 {
		t.Fatalf("%d areas hold seat state after one reservation, want 1", touched)
	}
	if grew := len(m.AppendSnapshot(nil)) - len(snap); grew > 200 {
		t.Fatalf("one 4-seat reservation grew the snapshot by %d bytes", grew)
	}
	if info := m.Query(GetArea{EventID: "ev", AreaID: areas[3].AreaID}).(AreaInfo); info.Available != 99_996 || info.Taken != 4 {
		t.Fatalf("touched area: %+v", info)
	}
	apply(m, &Cancel{ID: id(1)})
	if a := m.areas[areaKey{"ev", areas[3].AreaID}]; a.taken != nil || a.free != 100_000 {
		t.Fatalf("area with every seat given back keeps its seat state (free %d)", a.free)
	}
}

// snapshotV1Commands builds the state that testdata/snapshot-v1.bin holds:
// the file was written by the version 1 encoder (commit 723c4bc) after
// applying exactly these commands.
func snapshotV1Commands(m *Machine) {
	apply(m, &CreateEvent{Def: EventDef{EventName: "ev", Artist: "x", Areas: []AreaDef{
		{AreaID: "a", Price: 5, RowCount: 3, ColCount: 70}, {AreaID: "b", Price: 1, RowCount: 2, ColCount: 2}, {AreaID: "c", Price: 2, RowCount: 10, ColCount: 10}}}})
	apply(m, &CreateArea{EventID: "ev", Area: AreaDef{AreaID: "a", Price: 5, RowCount: 3, ColCount: 70}})
	apply(m, &CreateArea{EventID: "ev", Area: AreaDef{AreaID: "b", Price: 1, RowCount: 2, ColCount: 2}})
	apply(m, &CreateArea{EventID: "ev", Area: AreaDef{AreaID: "c", Price: 2, RowCount: 10, ColCount: 10}})
	for i := range 30 {
		apply(m, &Reserve{ID: id(i + 1), UserID: "u", EventID: "ev", AreaID: "a", Type: TypeRandom, NumOfSeats: int32(1 + i%4)})
	}
	apply(m, &Reserve{ID: id(40), UserID: "u", EventID: "ev", AreaID: "a", Type: TypeSelfPick, Seats: []Seat{{2, 69}, {2, 0}}, IdemKey: "k"})
	apply(m, &Reserve{ID: id(41), UserID: "u", EventID: "ev", AreaID: "b", Type: TypeRandom, NumOfSeats: 2})
	apply(m, &Reserve{ID: id(42), UserID: "u", EventID: "ev", AreaID: "zz", Type: TypeRandom, NumOfSeats: 2})
	apply(m, &Cancel{ID: id(41)})
	apply(m, &Cancel{ID: id(3)})
}

// TestRestoresVersion1Snapshot reads a snapshot the previous binary wrote
// (whole bitsets per area) into the same state the commands give now,
// untouched areas included.
func TestRestoresVersion1Snapshot(t *testing.T) {
	old, err := os.ReadFile(filepath.Join("testdata", "snapshot-v1.bin"))
	if err != nil {
		t.Fatal(err)
	}
	restored := NewMachine()
	if err := restored.Restore(old); err != nil {
		t.Fatal(err)
	}
	want := NewMachine()
	snapshotV1Commands(want)
	if !bytes.Equal(restored.AppendSnapshot(nil), want.AppendSnapshot(nil)) {
		t.Fatal("the version 1 snapshot restores to a different state")
	}
	for _, k := range []string{"b", "c"} {
		if a := restored.areas[areaKey{"ev", k}]; a.taken != nil {
			t.Fatalf("area %s has no seat taken but holds seat state after restore", k)
		}
	}
	checkInvariants(t, restored)
}

// TestRestoreRefusesSeatsOutsideTheArea: a snapshot may not mark seats
// past an area's grid or list a word twice; either would corrupt counters.
func TestRestoreRefusesSeatsOutsideTheArea(t *testing.T) {
	m := newTestMachine(AreaDef{AreaID: "a", RowCount: 1, ColCount: 3})
	good := m.AppendSnapshot(nil)
	// The area's seats are the byte after its definition: 0 words.
	i := bytes.LastIndex(good, []byte{3, 0, 0, 0, 0}) // colCount 3, no words, an empty records part
	if i < 0 {
		t.Fatal("layout changed; update the test")
	}
	with := func(tail ...byte) []byte {
		return append(append(append([]byte(nil), good[:i]...), tail...), 0, 0, 0) // no record names, records or purge queue
	}
	// Seat 2 taken is well formed, so what the bad cases change is all
	// that makes them fail.
	ok := NewMachine()
	if err := ok.Restore(with(3, 1, 0, 4, 0, 0, 0, 0, 0, 0, 0)); err != nil {
		t.Fatal(err)
	}
	if a := ok.areas[areaKey{"ev", "a"}]; !a.isTaken(0, 2) || a.free != 2 {
		t.Fatalf("restored area: free %d", a.free)
	}
	for _, bad := range [][]byte{
		with(3, 1, 0, 8, 0, 0, 0, 0, 0, 0, 0), // bit 3 of a 3-seat area
		with(3, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0), // word index 1 of 1 word
		with(3, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0), // an empty word listed
	} {
		if err := NewMachine().Restore(bad); err == nil {
			t.Fatalf("restore accepted seats %v", bad[i+1:])
		}
	}
}
