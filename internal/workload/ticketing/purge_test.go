package ticketing

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/engine/enginetest"
	"github.com/surge-run/surge/internal/wire"
)

type modelRec struct {
	state   State
	purgeAt int64 // 0: not queued
}

// TestPropertyRetentionPurge drives random reservations (compat and
// native, some in bursts that sell out and fail), cancellations with
// random retentions, and clock advances that fire the purge timer. A
// model (the retained set, the purge queue) says which records must exist
// after every step; the seat invariants are checked too. The timer must be
// armed exactly when something is queued, for the head's time. At the
// end, replaying the log from empty, and restoring a snapshot taken
// midway and replaying the rest, must give the same snapshot bytes.
func TestPropertyRetentionPurge(t *testing.T) {
	for seed := uint64(1); seed <= 30; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		areas := []AreaDef{{AreaID: "a", RowCount: 1 + rng.IntN(4), ColCount: 1 + rng.IntN(6)}, {AreaID: "b", RowCount: 2, ColCount: 2}}
		h := newHarness(t, areas...)
		model := map[[16]byte]*modelRec{}
		var queue [][16]byte
		// The model's purge: the queue in order, while the head is due.
		h.onFire(func(now int64) {
			if len(queue) == 0 {
				t.Fatalf("seed %d: the purge timer fired with nothing queued", seed)
			}
			for len(queue) > 0 && model[queue[0]].purgeAt <= now {
				delete(model, queue[0])
				queue = queue[1:]
			}
		})
		var issued [][16]byte
		retentions := []int64{0, 50, 200}
		next := 0
		newID := func() [16]byte {
			next++
			return id(next)
		}
		var midSnap []byte
		midAt := -1
		for step := 0; step < 400; step++ {
			switch k := rng.IntN(12); {
			case k < 4: // one reservation
				c := &Reserve{ID: newID(), UserID: fmt.Sprint("u", rng.IntN(3)), EventID: "ev", AreaID: []string{"a", "b", "zz"}[rng.IntN(3)],
					Type: []string{TypeRandom, TypeSelfPick, "BEST"}[rng.IntN(3)], NumOfSeats: int32(rng.IntN(4)), Retention: retentions[rng.IntN(3)], Strict: rng.IntN(3) == 0}
				if c.Type == TypeSelfPick {
					for range 1 + rng.IntN(2) {
						c.Seats = append(c.Seats, Seat{int32(rng.IntN(3)), int32(rng.IntN(6))})
					}
				}
				if rng.IntN(3) == 0 {
					c.IdemKey = []string{"k1", "k2"}[rng.IntN(2)]
				}
				res := h.Client("", c)
				if res.Outcome == OK {
					issued = append(issued, c.ID)
					mr := &modelRec{state: res.Res.State}
					model[c.ID] = mr
					if mr.state == StateFailed && c.Retention > 0 {
						mr.purgeAt = h.Now + c.Retention
						queue = append(queue, c.ID)
					}
					if res.PurgeAt != mr.purgeAt {
						t.Fatalf("seed %d step %d: PurgeAt %d, want %d", seed, step, res.PurgeAt, mr.purgeAt)
					}
				}
			case k < 5: // a burst of compat requests into a small area: most fail
				ret := retentions[1+rng.IntN(2)]
				for range 50 + rng.IntN(300) {
					c := &Reserve{ID: newID(), UserID: "burst", EventID: "ev", AreaID: "b", Type: TypeRandom, NumOfSeats: 1, Retention: ret}
					res := h.Client("", c)
					mr := &modelRec{state: res.Res.State}
					model[c.ID] = mr
					issued = append(issued, c.ID)
					if mr.state == StateFailed {
						mr.purgeAt = h.Now + ret
						queue = append(queue, c.ID)
					}
				}
			case k < 8: // cancel a known or a purged id
				if len(issued) == 0 {
					continue
				}
				rid := issued[rng.IntN(len(issued))]
				ret := retentions[rng.IntN(3)]
				res := h.Client("", &Cancel{ID: rid, Retention: ret})
				mr := model[rid]
				switch {
				case mr == nil:
					if res.Outcome != NotFound {
						t.Fatalf("seed %d step %d: cancel of a purged record: %+v", seed, step, res)
					}
				case mr.state == StateReserved:
					if res.Outcome != OK {
						t.Fatalf("seed %d step %d: cancel: %+v", seed, step, res)
					}
					mr.state = StateCancelled
					if ret > 0 {
						mr.purgeAt = h.Now + ret
						queue = append(queue, rid)
					}
				case res.Outcome == OK:
					t.Fatalf("seed %d step %d: cancel of a %v record succeeded", seed, step, mr.state)
				}
			default: // time passes
				h.Advance(int64(rng.IntN(120)))
			}
			if len(queue) > 0 && h.timer() != model[queue[0]].purgeAt {
				t.Fatalf("seed %d step %d: timer at %d, head of %d queued due at %d", seed, step, h.timer(), len(queue), model[queue[0]].purgeAt)
			}
			if len(queue) == 0 && h.timer() != 0 {
				t.Fatalf("seed %d step %d: timer armed at %d with nothing queued", seed, step, h.timer())
			}
			live := liveRecords(t, h.m())
			if len(live) != len(model) {
				t.Fatalf("seed %d step %d: %d records, model %d", seed, step, len(live), len(model))
			}
			for _, r := range live {
				if mr := model[r.ID]; mr == nil || mr.state != r.State {
					t.Fatalf("seed %d step %d: record %x is %v, model %+v", seed, step, r.ID, r.State, mr)
				}
				if got := h.m().Query(GetReservation{ID: r.ID}).(*Result); got.Outcome != OK || got.Res.ID != r.ID {
					t.Fatalf("seed %d step %d: GET of a live record: %+v", seed, step, got)
				}
			}
			checkInvariants(t, h.m())
			if step == 200 {
				midSnap, midAt = h.m().AppendSnapshot(nil), len(h.Log[0])
			}
		}
		final := h.m().AppendSnapshot(nil)

		again := newTestMachine(areas...)
		enginetest.Replay(t, again, h.Log[0])
		if !bytes.Equal(again.AppendSnapshot(nil), final) {
			t.Fatalf("seed %d: replay from empty gives a different state", seed)
		}
		restored := NewMachine()
		if err := restored.Restore(midSnap); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(restored.AppendSnapshot(nil), midSnap) {
			t.Fatalf("seed %d: snapshot round trip changed the state", seed)
		}
		enginetest.Replay(t, restored, h.Log[0][midAt:])
		if !bytes.Equal(restored.AppendSnapshot(nil), final) {
			t.Fatalf("seed %d: restore + replay of the rest gives a different state", seed)
		}
		checkInvariants(t, restored)
	}
}

// TestForkedSnapshotDuringPurges encodes forked snapshots on another
// goroutine while reservations, cancellations, purges and compactions go
// on: the bytes must equal a synchronous snapshot taken at the fork. Run
// with -race, this also shows that the copy-on-write keeps the encoder
// from reading anything the machine writes.
func TestForkedSnapshotDuringPurges(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	h := newHarness(t, AreaDef{AreaID: "a", RowCount: 20, ColCount: 20}, AreaDef{AreaID: "b", RowCount: 2, ColCount: 2})
	var ids [][16]byte
	next := 0
	compactions := 0
	mutate := func(n int) {
		for range n {
			switch k := rng.IntN(10); {
			case k < 2 && len(ids) > 0:
				h.Client("", &Cancel{ID: ids[rng.IntN(len(ids))], Retention: 30})
			case k < 3:
				before := h.m().recs.recs.n
				h.Advance(int64(rng.IntN(40)))
				if h.m().recs.recs.n < before {
					compactions++
				}
			default:
				next++
				c := &Reserve{ID: id(next), UserID: fmt.Sprint("u", next%7), EventID: "ev", AreaID: []string{"a", "b", "b", "b"}[rng.IntN(4)], Type: TypeRandom, NumOfSeats: int32(1 + rng.IntN(3)), Retention: 20}
				if rng.IntN(5) == 0 {
					c.Type, c.Seats = TypeSelfPick, []Seat{{int32(rng.IntN(20)), int32(rng.IntN(20))}}
				}
				if rng.IntN(4) == 0 {
					c.IdemKey = fmt.Sprint("k", next)
				}
				if r := h.Client("", c); r.Outcome == OK {
					ids = append(ids, c.ID)
				}
			}
		}
	}
	for round := range 40 {
		mutate(500)
		want := h.m().AppendSnapshot(nil)
		encode := h.m().ForkSnapshot()
		done := make(chan []byte)
		go func() { done <- encode(nil) }()
		mutate(500)
		if got := <-done; !bytes.Equal(got, want) {
			t.Fatalf("round %d: forked snapshot differs from the state at the fork", round)
		}
		checkInvariants(t, h.m())
	}
	if compactions == 0 {
		t.Fatal("no compaction happened; the test does not cover it")
	}
	t.Logf("%d compactions", compactions)
}

// appendV1Snapshot writes a state in snapshot version 1, the format before
// records were compact (its records part, as that binary wrote it).
func appendV1Snapshot(events []EventDef, areas []AreaDef, taken [][]uint64, recs []Reservation) []byte {
	w := wire.Writer{}
	w.U32(1)
	w.Uvarint(uint64(len(events)))
	for i := range events {
		appendEventDef(&w, &events[i])
	}
	w.Uvarint(uint64(len(areas)))
	for i := range areas {
		w.Str(events[0].EventName)
		appendAreaDef(&w, &areas[i])
		for _, word := range taken[i] {
			w.U64(word)
		}
	}
	w.Uvarint(uint64(len(recs)))
	for _, r := range recs {
		appendRequest(&w, &r.ID, r.UserID, r.EventID, r.AreaID, r.Type, r.NumOfSeats, r.Seats)
		w.U8(uint8(r.State))
		w.U8(uint8(r.Reason))
		w.I32(r.ReasonA)
		w.I32(r.ReasonB)
		w.Str(r.IdemKey)
		w.U64(0)
	}
	return w.B
}

// TestRestoresVersion1SnapshotRecords: a snapshot written before this version is
// read, its records are all there (kept for ever: they carry no
// retention), and a RANDOM record that is not one run in a row, which the
// compact form could not hold, is refused with a clear error.
func TestRestoresVersion1SnapshotRecords(t *testing.T) {
	ev := EventDef{EventName: "ev", Areas: []AreaDef{{AreaID: "a", RowCount: 2, ColCount: 4}}}
	recs := []Reservation{
		{ID: id(1), UserID: "u", EventID: "ev", AreaID: "a", Type: TypeRandom, NumOfSeats: 2, Seats: []Seat{{1, 1}, {1, 2}}, State: StateReserved},
		{ID: id(2), UserID: "v", EventID: "ev", AreaID: "a", Type: TypeSelfPick, NumOfSeats: 1, Seats: []Seat{{0, 3}}, State: StateCancelled, IdemKey: "k"},
		{ID: id(3), UserID: "w", EventID: "ev", AreaID: "zz", Type: "BEST", State: StateFailed, Reason: ReasonInvalidType},
		{ID: id(4), UserID: "w", EventID: "ev", AreaID: "a", Type: TypeRandom, NumOfSeats: 9, State: StateFailed, Reason: ReasonNoContinuous, ReasonA: 9},
	}
	taken := [][]uint64{{1<<5 | 1<<6}}
	m := NewMachine()
	if err := m.Restore(appendV1Snapshot([]EventDef{ev}, ev.Areas, taken, recs)); err != nil {
		t.Fatal(err)
	}
	for _, want := range recs {
		got := m.Query(GetReservation{ID: want.ID}).(*Result)
		if got.Outcome != OK || fmt.Sprint(got.Res) != fmt.Sprint(want) {
			t.Fatalf("restored %+v, want %+v", got.Res, want)
		}
	}
	checkInvariants(t, m)
	if m.recs.queue.Len() != 0 {
		t.Fatal("version 1 records were queued for purging")
	}
	bad := append([]Reservation(nil), recs...)
	bad[0].Seats = []Seat{{1, 1}, {1, 3}}
	taken[0][0] = 1<<5 | 1<<7
	err := NewMachine().Restore(appendV1Snapshot([]EventDef{ev}, ev.Areas, taken, bad))
	if err == nil || !strings.Contains(err.Error(), "adjacent") {
		t.Fatalf("non-adjacent RANDOM seats: %v", err)
	}
}

// TestCommandsLoggedWithoutRetentionDecode: Reserve and Cancel records
// logged before the retention field existed decode, with retention 0
// (kept for ever), and the field round-trips.
func TestCommandsLoggedWithoutRetentionDecode(t *testing.T) {
	m := NewMachine()
	for _, c := range []engine.Command{
		&Reserve{ID: id(1), UserID: "u", EventID: "e", AreaID: "a", Type: TypeRandom, NumOfSeats: 2, IdemKey: "k", Strict: true, Retention: 900e9},
		&Cancel{ID: id(2), Retention: 5},
	} {
		b, _ := c.AppendBinary(nil)
		got, err := m.Decode(b)
		if err != nil || fmt.Sprint(got) != fmt.Sprint(c) {
			t.Fatalf("round trip of %+v: %+v %v", c, got, err)
		}
		old, _ := c.AppendBinary(nil)
		switch c := c.(type) {
		case *Reserve:
			old = old[:len(old)-len(binaryUvarint(uint64(c.Retention)))]
			c.Retention, c.legacy = 0, true
		case *Cancel:
			old = old[:17]
			c.Retention, c.legacy = 0, true
		}
		got, err = m.Decode(old)
		if err != nil || fmt.Sprint(got) != fmt.Sprint(c) {
			t.Fatalf("old record: %+v %v, want %+v", got, err, c)
		}
		if again, _ := got.AppendBinary(nil); !bytes.Equal(again, old) {
			t.Fatalf("old record %x re-encodes to %x", old, again)
		}
	}
}

func binaryUvarint(v uint64) []byte {
	w := wire.Writer{}
	w.Uvarint(v)
	return w.B
}
