package ticketing

import (
	"math"

	"github.com/surge-run/surge/internal/retain"
	"github.com/surge-run/surge/internal/wire"
)

// Reservation records are stored compactly and without pointers, so a
// partition holding a million of them costs tens of megabytes and nothing
// for the garbage collector to scan:
//
//   - records live by value in chunks of a slab, in creation order; an
//     index maps an id to its slot;
//   - the event and area names are interned ((event, area) pairs are few);
//   - user ids are bytes in an arena;
//   - a RANDOM reservation's seats are one run in one row, kept as (row,
//     col, n) in fields a FAILED one uses for its reason's arguments;
//   - the rare rest (SELF_PICK seats, an invalid type's text, an
//     idempotency key) is an "extra" in a side slab, only for the records
//     that have one.
//
// Purged records leave holes; once the holes outnumber the live records
// the store is compacted (copied in order into new chunks), so memory
// follows what is retained and the cost is amortized per purge.
//
// The snapshot is encoded on another goroutine from a view that the
// partition forks cheaply (see ForkSnapshot): the view is a copy of the
// chunk pointers and lengths. Appending writes only past the view's
// lengths, and compaction builds new chunks, so neither touches what the
// view reads. The two in-place changes, a cancel and a purge, go through
// mut, which copies a chunk first if a view may share it (the chunk is
// older than the latest fork: copy-on-write by generation). A chunk is
// then copied at most once per snapshot, only if something in it changes.

const (
	chunkBits = 10
	chunkSize = 1 << chunkBits
)

type chunk[T any] struct {
	gen uint64 // fork generation it was made in; older ones may be shared
	v   [chunkSize]T
}

// slab is an append-only array in chunks.
type slab[T any] struct {
	chunks []*chunk[T]
	n      uint32
}

func (s *slab[T]) at(i uint32) *T { return &s.chunks[i>>chunkBits].v[i&(chunkSize-1)] }

func (s *slab[T]) push(v T, gen uint64) uint32 {
	if s.n == math.MaxUint32 {
		panic("ticketing: record slab is full") // 4 billion records in one partition
	}
	if int(s.n>>chunkBits) == len(s.chunks) {
		s.chunks = append(s.chunks, &chunk[T]{gen: gen})
	}
	i := s.n
	*s.at(i) = v
	s.n++
	return i
}

// mut returns slot i for an in-place change, copying its chunk first if a
// forked view may be reading it.
func (s *slab[T]) mut(i uint32, gen uint64) *T {
	c := s.chunks[i>>chunkBits]
	if c.gen != gen {
		cp := *c
		cp.gen = gen
		c = &cp
		s.chunks[i>>chunkBits] = c
	}
	return &c.v[i&(chunkSize-1)]
}

// view is a copy of the chunk pointers: what a fork reads.
func (s *slab[T]) view() slab[T] {
	return slab[T]{chunks: append([]*chunk[T](nil), s.chunks...), n: s.n}
}

// record is the stored form of a Reservation.
type record struct {
	id      [16]byte
	userOff uint32 // user id: user[userOff:userOff+userLen]
	userLen uint16
	typ     uint8 // typRandom, typSelfPick or typOther (text in the extra)
	state   State
	reason  Reason
	flags   uint8
	name    uint32 // index in names: the (event, area) pair
	n       int32  // numOfSeats
	a, b    int32  // FAILED: the reason's arguments; RANDOM with seats: the run's row and first col
	extra   uint32 // index in extras if flags&hasExtra
}

const (
	typRandom   = 1
	typSelfPick = 2
	typOther    = 3

	hasExtra = 1 << 0
	dead     = 1 << 1
)

// extra holds what few records need.
type extra struct {
	typ     string // an invalid type as the client sent it
	seats   []Seat // SELF_PICK seats
	idemKey string
	idemFP  uint64
}

// due is an entry of the purge queue: the record in slot is purged at at.
type due struct {
	at   int64
	slot uint32
}

func (d due) Due() int64 { return d.at }

// store holds a partition's reservation records.
type store struct {
	recs    slab[record]
	extras  slab[extra]
	user    []byte
	names   []areaKey
	nameIdx map[areaKey]uint32
	index   map[[16]byte]uint32
	idem    map[idemKey][16]byte
	// queue holds the terminal records in the order they became terminal,
	// each with the time it is to be purged.
	queue retain.Queue[due]
	live  int
	// gen counts forks; chunks of an older generation may be shared.
	gen uint64
	// bytes estimates the snapshot size of the records, kept as they are
	// added so the estimate costs nothing to read.
	bytes int
}

func newStore() store {
	return store{nameIdx: make(map[areaKey]uint32), index: make(map[[16]byte]uint32), idem: make(map[idemKey][16]byte)}
}

func typeCode(t string) uint8 {
	switch t {
	case TypeRandom:
		return typRandom
	case TypeSelfPick:
		return typSelfPick
	}
	return typOther
}

func (s *store) intern(k areaKey) uint32 {
	if i, ok := s.nameIdx[k]; ok {
		return i
	}
	i := uint32(len(s.names))
	s.names = append(s.names, k)
	s.nameIdx[k] = i
	return i
}

// add stores r (with its idempotency fingerprint) and returns its slot.
func (s *store) add(r *Reservation, idemFP uint64) uint32 {
	rec := record{id: r.ID, typ: typeCode(r.Type), state: r.State, reason: r.Reason, n: r.NumOfSeats, a: r.ReasonA, b: r.ReasonB}
	rec.name = s.intern(areaKey{r.EventID, r.AreaID})
	rec.userOff, rec.userLen = s.addUser(r.UserID)
	var x extra
	need := false
	if rec.typ == typOther {
		x.typ, need = r.Type, true
	}
	if len(r.Seats) > 0 {
		if rec.typ == typRandom {
			rec.a, rec.b = r.Seats[0].Row, r.Seats[0].Col
		} else {
			x.seats, need = r.Seats, true
		}
	}
	if r.IdemKey != "" {
		x.idemKey, x.idemFP, need = r.IdemKey, idemFP, true
		s.idem[idemKey{r.UserID, r.IdemKey}] = r.ID
	}
	if need {
		rec.flags |= hasExtra
		rec.extra = s.extras.push(x, s.gen)
	}
	slot := s.recs.push(rec, s.gen)
	s.index[r.ID] = slot
	s.live++
	s.bytes += s.size(&rec)
	return slot
}

// size estimates a record's snapshot encoding.
func (s *store) size(rec *record) int {
	n := 40 + int(rec.userLen)
	if rec.flags&hasExtra != 0 {
		x := s.extras.at(rec.extra)
		n += len(x.typ) + len(x.idemKey) + 8*len(x.seats)
	}
	return n
}

// addUser appends a user id to the arena, sharing the previous record's
// copy when it is the same user (clients tend to repeat).
func (s *store) addUser(u string) (uint32, uint16) {
	if n := s.recs.n; n > 0 {
		p := s.recs.at(n - 1)
		if int(p.userLen) == len(u) && string(s.user[p.userOff:p.userOff+uint32(p.userLen)]) == u {
			return p.userOff, p.userLen
		}
	}
	if len(u) > math.MaxUint16 || len(s.user)+len(u) > math.MaxUint32 {
		panic("ticketing: user id arena is full")
	}
	off := uint32(len(s.user))
	s.user = append(s.user, u...)
	return off, uint16(len(u))
}

// lookup returns the slot of a live record.
func (s *store) lookup(id [16]byte) (uint32, bool) {
	slot, ok := s.index[id]
	return slot, ok
}

// reservation builds the public form of the record in slot.
func (s *store) reservation(slot uint32) Reservation {
	return viewReservation(s.recs.at(slot), &s.extras, s.user, s.names)
}

func viewReservation(rec *record, extras *slab[extra], user []byte, names []areaKey) Reservation {
	k := names[rec.name]
	r := Reservation{
		ID: rec.id, UserID: string(user[rec.userOff : rec.userOff+uint32(rec.userLen)]),
		EventID: k.event, AreaID: k.area, NumOfSeats: rec.n, State: rec.state, Reason: rec.reason,
	}
	var x *extra
	if rec.flags&hasExtra != 0 {
		x = extras.at(rec.extra)
		r.IdemKey = x.idemKey
	}
	switch rec.typ {
	case typRandom:
		r.Type = TypeRandom
		if rec.state != StateFailed {
			r.Seats = make([]Seat, rec.n)
			for i := range r.Seats {
				r.Seats[i] = Seat{Row: rec.a, Col: rec.b + int32(i)}
			}
			return r
		}
	case typSelfPick:
		r.Type = TypeSelfPick
		if x != nil {
			r.Seats = x.seats
		}
	default:
		r.Type = x.typ
	}
	if rec.state == StateFailed {
		r.ReasonA, r.ReasonB = rec.a, rec.b
	}
	return r
}

// idemFP returns the idempotency fingerprint of the record in slot.
func (s *store) idemFP(slot uint32) uint64 {
	rec := s.recs.at(slot)
	if rec.flags&hasExtra == 0 {
		return 0
	}
	return s.extras.at(rec.extra).idemFP
}

// setState changes a record's state in place (copy-on-write).
func (s *store) setState(slot uint32, st State) { s.recs.mut(slot, s.gen).state = st }

// retire queues the record in slot to be purged at at. It reports whether
// the queue was empty, so the caller knows to arm the purge timer.
func (s *store) retire(slot uint32, at int64) (wasEmpty bool) {
	return s.queue.Push(due{at: at, slot: slot})
}

// next returns the purge time of the first queued record.
func (s *store) next() (int64, bool) { return s.queue.Next() }

// purge removes up to max queued records due at now, in queue order, and
// reports how many it removed.
func (s *store) purge(now int64, max int) int {
	k := s.queue.PopDue(now, max, func(d due) { s.remove(d.slot) })
	if dead := int(s.recs.n) - s.live; dead >= chunkSize && dead > s.live {
		s.compact()
	}
	return k
}

func (s *store) remove(slot uint32) {
	rec := s.recs.mut(slot, s.gen)
	rec.flags |= dead
	s.bytes -= s.size(rec)
	delete(s.index, rec.id)
	if rec.flags&hasExtra != 0 {
		if x := s.extras.at(rec.extra); x.idemKey != "" {
			k := idemKey{string(s.user[rec.userOff : rec.userOff+uint32(rec.userLen)]), x.idemKey}
			if s.idem[k] == rec.id {
				delete(s.idem, k)
			}
		}
	}
	s.live--
}

// compact copies the live records, in order, into fresh chunks, with
// their extras, user ids and names, and renumbers the index and the queue.
// Nothing old is written, so a forked view keeps reading it.
func (s *store) compact() {
	old := *s
	ns := newStore()
	ns.idem, ns.gen, ns.bytes = s.idem, s.gen, s.bytes
	ns.index = s.index
	remap := make([]uint32, old.recs.n)
	for i := range old.recs.n {
		rec := *old.recs.at(i)
		if rec.flags&dead != 0 {
			continue
		}
		rec.name = ns.intern(old.names[rec.name])
		u := old.user[rec.userOff : rec.userOff+uint32(rec.userLen)]
		if n := ns.recs.n; n > 0 && string(u) == string(ns.userOf(ns.recs.at(n-1))) {
			rec.userOff = ns.recs.at(n - 1).userOff
		} else {
			rec.userOff = uint32(len(ns.user))
			ns.user = append(ns.user, u...)
		}
		if rec.flags&hasExtra != 0 {
			rec.extra = ns.extras.push(*old.extras.at(rec.extra), ns.gen)
		}
		remap[i] = ns.recs.push(rec, ns.gen)
		ns.index[rec.id] = remap[i]
		ns.live++
	}
	for d := range old.queue.All() {
		d.slot = remap[d.slot]
		ns.queue.Push(d)
	}
	*s = ns
}

func (s *store) userOf(rec *record) []byte {
	return s.user[rec.userOff : rec.userOff+uint32(rec.userLen)]
}

// storeView is what a snapshot reads: the state at the fork.
type storeView struct {
	recs   slab[record]
	extras slab[extra]
	user   []byte
	names  []areaKey
	queue  retain.Queue[due]
}

// fork captures the view and starts a new generation, so that what the
// view shares is copied before it is changed.
func (s *store) fork() *storeView {
	v := &storeView{recs: s.recs.view(), extras: s.extras.view(), user: s.user, names: s.names, queue: s.queue.View()}
	s.gen++
	return v
}

// Records part of the snapshot, version 2: the (event, area) names the
// records use, in order of first use; the live records in creation order;
// then the purge queue, each entry as the position of its record in that
// order and its purge time.
func (v *storeView) appendTo(w *wire.Writer) {
	nameOut := make([]uint32, len(v.names)) // index+1 in the output, 0 if not yet written
	var order []uint32
	ordinal := make([]uint32, v.recs.n)
	var live uint32
	for i := range v.recs.n {
		rec := v.recs.at(i)
		if rec.flags&dead != 0 {
			continue
		}
		ordinal[i] = live
		live++
		if nameOut[rec.name] == 0 {
			order = append(order, rec.name)
			nameOut[rec.name] = uint32(len(order))
		}
	}
	w.Uvarint(uint64(len(order)))
	for _, n := range order {
		w.Str(v.names[n].event)
		w.Str(v.names[n].area)
	}
	w.Uvarint(uint64(live))
	for i := range v.recs.n {
		rec := v.recs.at(i)
		if rec.flags&dead != 0 {
			continue
		}
		w.B = append(w.B, rec.id[:]...)
		w.Uvarint(uint64(nameOut[rec.name] - 1))
		w.Bytes(v.user[rec.userOff : rec.userOff+uint32(rec.userLen)])
		w.U8(rec.typ)
		w.U8(uint8(rec.state))
		w.U8(uint8(rec.reason))
		w.Uvarint(uint64(uint32(rec.n)))
		w.Uvarint(uint64(uint32(rec.a)))
		w.Uvarint(uint64(uint32(rec.b)))
		var x extra
		if rec.flags&hasExtra != 0 {
			x = *v.extras.at(rec.extra)
		}
		if rec.typ == typOther {
			w.Str(x.typ)
		}
		if rec.typ == typSelfPick {
			w.Uvarint(uint64(len(x.seats)))
			for _, st := range x.seats {
				w.Uvarint(uint64(uint32(st.Row)))
				w.Uvarint(uint64(uint32(st.Col)))
			}
		}
		w.Str(x.idemKey)
		if x.idemKey != "" {
			w.U64(x.idemFP)
		}
	}
	w.Uvarint(uint64(v.queue.Len()))
	for d := range v.queue.All() {
		w.Uvarint(uint64(ordinal[d.slot]))
		w.U64(uint64(d.at))
	}
}
