package ticketing

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/wire"
)

// Command encoding, version 1: a tag byte, then the fields in order.
const (
	tagCreateEvent = 1
	tagCreateArea  = 2
	tagReserve     = 3
	tagCancel      = 4
	tagPurge       = 5
)

// CreateEvent records an event's definition under the event's own key.
type CreateEvent struct{ Def EventDef }

// CreateArea creates one area's seat grid under the (event, area) key.
type CreateArea struct {
	EventID string
	Area    AreaDef
}

// Reserve asks for seats in one area. ID is chosen by the gateway so that
// it names the partition that holds the record (see the API layer).
type Reserve struct {
	ID         [16]byte
	UserID     string
	EventID    string
	AreaID     string
	Type       string
	NumOfSeats int32
	Seats      []Seat
	IdemKey    string
	Strict     bool
	// Retention is how long the record is kept once it is FAILED, in ns;
	// 0 keeps it for ever (see Machine.retire for why it is logged).
	// Records logged before it existed decode with 0.
	Retention int64
	// legacy: decoded from a record logged before Retention existed, so
	// that it re-encodes to its own bytes.
	legacy bool
}

// Cancel frees a RESERVED reservation's seats; the record is then kept
// for Retention (ns; 0: for ever).
type Cancel struct {
	ID        [16]byte
	Retention int64
	legacy    bool // as Reserve's
}

// Purge is the command of the purge timer: it removes the terminal
// records whose retention has passed.
type Purge struct{}

func appendAreaDef(w *wire.Writer, a *AreaDef) {
	w.Str(a.AreaID)
	w.F64(a.Price)
	w.Uvarint(uint64(a.RowCount))
	w.Uvarint(uint64(a.ColCount))
}

func readAreaDef(r *wire.Reader) AreaDef {
	return AreaDef{AreaID: r.Str(), Price: r.F64(), RowCount: int(r.Uvarint()), ColCount: int(r.Uvarint())}
}

func appendEventDef(w *wire.Writer, d *EventDef) {
	w.Str(d.EventName)
	w.Str(d.Artist)
	w.Str(d.ReservationOpeningTime)
	w.Str(d.ReservationClosingTime)
	w.Str(d.EventStartTime)
	w.Str(d.EventEndTime)
	w.Uvarint(uint64(len(d.Areas)))
	for i := range d.Areas {
		appendAreaDef(w, &d.Areas[i])
	}
}

func readEventDef(r *wire.Reader) EventDef {
	d := EventDef{EventName: r.Str(), Artist: r.Str(), ReservationOpeningTime: r.Str(), ReservationClosingTime: r.Str(), EventStartTime: r.Str(), EventEndTime: r.Str()}
	n := r.Count(12)
	d.Areas = make([]AreaDef, 0, n)
	for range n {
		d.Areas = append(d.Areas, readAreaDef(r))
	}
	return d
}

func (c *CreateEvent) AppendBinary(b []byte) ([]byte, error) {
	w := wire.Writer{B: append(b, tagCreateEvent)}
	appendEventDef(&w, &c.Def)
	return w.B, nil
}

func (c *CreateArea) AppendBinary(b []byte) ([]byte, error) {
	w := wire.Writer{B: append(b, tagCreateArea)}
	w.Str(c.EventID)
	appendAreaDef(&w, &c.Area)
	return w.B, nil
}

func (c *Reserve) AppendBinary(b []byte) ([]byte, error) {
	w := wire.Writer{B: append(b, tagReserve)}
	appendRequest(&w, &c.ID, c.UserID, c.EventID, c.AreaID, c.Type, c.NumOfSeats, c.Seats)
	w.Str(c.IdemKey)
	w.Bool(c.Strict)
	appendRetention(&w, c.Retention, c.legacy)
	return w.B, nil
}

// appendRequest and readRequest encode what a reservation asked for; a
// Reserve command and a Reservation record share it.
func appendRequest(w *wire.Writer, id *[16]byte, user, event, area, typ string, n int32, seats []Seat) {
	w.B = append(w.B, id[:]...)
	w.Str(user)
	w.Str(event)
	w.Str(area)
	w.Str(typ)
	w.I32(n)
	w.Uvarint(uint64(len(seats)))
	for _, s := range seats {
		w.I32(s.Row)
		w.I32(s.Col)
	}
}

func readRequest(r *wire.Reader, id *[16]byte, user, event, area, typ *string, n *int32, seats *[]Seat) {
	copy(id[:], r.Next(16))
	*user, *event, *area, *typ = r.Str(), r.Str(), r.Str(), internType(r.Str())
	*n = r.I32()
	if k := r.Count(8); k > 0 {
		*seats = make([]Seat, k)
		for i := range *seats {
			(*seats)[i] = Seat{Row: r.I32(), Col: r.I32()}
		}
	}
}

func (c *Cancel) AppendBinary(b []byte) ([]byte, error) {
	w := wire.Writer{B: append(append(b, tagCancel), c.ID[:]...)}
	appendRetention(&w, c.Retention, c.legacy)
	return w.B, nil
}

func (c *Purge) AppendBinary(b []byte) ([]byte, error) { return append(b, tagPurge), nil }

// optRetention reads a retention that records logged before it existed
// lack (legacy: it was lacking).
func optRetention(r *wire.Reader) (retention int64, legacy bool) {
	if len(r.B) == 0 {
		return 0, true
	}
	return int64(r.Uvarint()), false
}

// appendRetention writes what optRetention reads; a legacy record's
// retention is always 0.
func appendRetention(w *wire.Writer, retention int64, legacy bool) {
	if !legacy {
		w.Uvarint(uint64(retention))
	}
}

// fingerprint identifies what a request asked for, so a reused
// idempotency key with a different request is caught.
func (c *Reserve) fingerprint() uint64 {
	h := engine.HashMore(engine.Hash(c.EventID), "\x00"+c.AreaID+"\x00"+c.Type+"\x00")
	var n [8]byte
	mix := func(v int32) {
		binary.LittleEndian.PutUint32(n[:4], uint32(v))
		h = engine.HashMore(h, string(n[:4]))
	}
	mix(c.NumOfSeats)
	for _, s := range c.Seats {
		mix(s.Row)
		mix(s.Col)
	}
	return h
}

var errUnknownCommand = errors.New("ticketing: unknown command tag")

// Decode implements engine.Machine. It reads only what AppendBinary
// writes (wire's canonical-form rule, no bytes after the command), so a
// logged record means one command.
func (m *Machine) Decode(data []byte) (engine.Command, error) {
	if len(data) == 0 {
		return nil, errUnknownCommand
	}
	r := wire.Reader{B: data[1:]}
	var cmd engine.Command
	switch data[0] {
	case tagCreateEvent:
		cmd = &CreateEvent{Def: readEventDef(&r)}
	case tagCreateArea:
		c := &CreateArea{EventID: r.Str()}
		c.Area = readAreaDef(&r)
		cmd = c
	case tagReserve:
		c := &Reserve{}
		readRequest(&r, &c.ID, &c.UserID, &c.EventID, &c.AreaID, &c.Type, &c.NumOfSeats, &c.Seats)
		c.IdemKey = r.Str()
		c.Strict = r.Bool()
		c.Retention, c.legacy = optRetention(&r)
		cmd = c
	case tagCancel:
		c := &Cancel{}
		copy(c.ID[:], r.Next(16))
		c.Retention, c.legacy = optRetention(&r)
		cmd = c
	case tagPurge:
		cmd = &Purge{}
	default:
		return nil, fmt.Errorf("%w %d", errUnknownCommand, data[0])
	}
	if r.Err == nil && len(r.B) > 0 {
		r.Err = fmt.Errorf("%d bytes after the command", len(r.B))
	}
	if r.Err != nil {
		return nil, fmt.Errorf("ticketing: decoding command %d: %w", data[0], r.Err)
	}
	return cmd, nil
}

// internType shares the two valid type strings so a million reservations
// do not each hold a copy.
func internType(s string) string {
	switch s {
	case TypeRandom:
		return TypeRandom
	case TypeSelfPick:
		return TypeSelfPick
	}
	return s
}

// Snapshot encoding. Everything is written in sorted order so the same
// state always encodes to the same bytes. Version 2 writes an area's seats
// sparsely (see appendAreaSeats) and the records compactly (records.go);
// version 1, which wrote every area's whole bitset and full records, is
// still read.
const (
	snapshotVersion   = 2
	snapshotVersionV1 = 1
)

// AppendSnapshot implements engine.Machine.
func (m *Machine) AppendSnapshot(dst []byte) []byte { return m.ForkSnapshot()(dst) }

// ForkSnapshot implements engine.SnapshotForker. Event definitions are
// never modified after they are stored, so the view is: the sorted events,
// copies of the areas' seat bitsets (small), and the records' view (a copy
// of their chunk pointers; records.go says why that is safe). Encoding it
// needs nothing else from the live state.
func (m *Machine) ForkSnapshot() func(dst []byte) []byte {
	names := make([]string, 0, len(m.events))
	for n := range m.events {
		names = append(names, n)
	}
	sort.Strings(names)
	events := make([]*EventDef, len(names))
	for i, n := range names {
		events[i] = m.events[n]
	}

	keys := make([]areaKey, 0, len(m.areas))
	for k := range m.areas {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].event != keys[j].event {
			return keys[i].event < keys[j].event
		}
		return keys[i].area < keys[j].area
	})
	areas := make([]area, len(keys))
	for i, k := range keys {
		a := m.areas[k]
		areas[i] = area{eventID: a.eventID, def: a.def, taken: slices.Clone(a.taken)}
	}
	recs := m.recs.fork()

	return func(dst []byte) []byte {
		w := wire.Writer{B: dst}
		w.U32(snapshotVersion)
		w.Uvarint(uint64(len(events)))
		for _, d := range events {
			appendEventDef(&w, d)
		}
		w.Uvarint(uint64(len(areas)))
		for i := range areas {
			a := &areas[i]
			w.Str(a.eventID)
			appendAreaDef(&w, &a.def)
			appendAreaSeats(&w, a.taken)
		}
		recs.appendTo(&w)
		return w.B
	}
}

// SnapshotSizeHint estimates AppendSnapshot's output size.
func (m *Machine) SnapshotSizeHint() int {
	n := 64 + 256*len(m.events)
	for _, a := range m.areas {
		n += 64 + 9*len(a.taken)
	}
	return n + m.recs.bytes
}

// Restore implements engine.Machine.
func (m *Machine) Restore(data []byte) error {
	*m = *NewMachine()
	r := wire.Reader{B: data}
	v := r.U32()
	if r.Err == nil && v != snapshotVersion && v != snapshotVersionV1 {
		return fmt.Errorf("ticketing: snapshot version %d; this binary reads versions %d and %d", v, snapshotVersionV1, snapshotVersion)
	}
	for n := r.Count(8); n > 0 && r.Err == nil; n-- {
		d := readEventDef(&r)
		m.events[d.EventName] = &d
	}
	for n := r.Count(12); n > 0 && r.Err == nil; n-- {
		ev := r.Str()
		def := readAreaDef(&r)
		if msg := ValidateArea(&def); msg != "" {
			return fmt.Errorf("ticketing: snapshot holds an invalid area: %s", msg)
		}
		a := newArea(ev, def)
		if err := a.readSeats(&r, v == snapshotVersionV1); err != nil {
			return err
		}
		m.areas[areaKey{ev, def.AreaID}] = a
	}
	var err error
	if v == snapshotVersionV1 {
		err = m.readRecordsV1(&r)
	} else {
		err = m.readRecords(&r)
	}
	if err != nil {
		return err
	}
	if r.Err != nil {
		return fmt.Errorf("ticketing: snapshot: %w", r.Err)
	}
	return nil
}

// appendAreaSeats writes an area's taken seats as the number of non-zero
// bitset words, then each as the gap since the previous one and the word.
// An untouched area is one byte, a sold-out one about its bitset's size.
func appendAreaSeats(w *wire.Writer, taken []uint64) {
	nonzero := 0
	for _, word := range taken {
		if word != 0 {
			nonzero++
		}
	}
	w.Uvarint(uint64(nonzero))
	prev := -1
	for i, word := range taken {
		if word != 0 {
			w.Uvarint(uint64(i - prev - 1))
			w.U64(word)
			prev = i
		}
	}
}

// readSeats reads what appendAreaSeats wrote (or, from a version 1
// snapshot, the whole bitset) and rebuilds the free counters. An area with
// nothing taken stays untouched.
func (a *area) readSeats(r *wire.Reader, dense bool) error {
	n := a.def.RowCount * a.def.ColCount
	var words []uint64
	if dense {
		words = make([]uint64, (n+63)/64)
		for i := range words {
			words[i] = r.U64()
		}
	} else if k := r.Count(9); k > 0 {
		words = make([]uint64, (n+63)/64)
		for i := -1; k > 0 && r.Err == nil; k-- {
			gap := r.Uvarint()
			if gap >= uint64(len(words)-i-1) {
				return fmt.Errorf("ticketing: snapshot marks seats past the end of area %q/%q", a.eventID, a.def.AreaID)
			}
			i += int(gap) + 1
			if words[i] = r.U64(); words[i] == 0 && r.Err == nil {
				return fmt.Errorf("ticketing: snapshot lists an empty seat word in area %q/%q", a.eventID, a.def.AreaID)
			}
		}
	}
	if r.Err != nil {
		return fmt.Errorf("ticketing: snapshot: %w", r.Err)
	}
	if words == nil {
		return nil
	}
	if extra := n % 64; extra != 0 && words[len(words)-1]>>extra != 0 {
		return fmt.Errorf("ticketing: snapshot marks seats past the end of area %q/%q", a.eventID, a.def.AreaID)
	}
	if !slices.ContainsFunc(words, func(w uint64) bool { return w != 0 }) {
		return nil
	}
	a.taken = words
	a.rowFree = make([]uint16, a.def.RowCount)
	a.free = 0
	for row := range a.def.RowCount {
		f := 0
		for c := range a.def.ColCount {
			if !a.isTaken(row, c) {
				f++
			}
		}
		a.rowFree[row] = uint16(f)
		a.free += f
	}
	return nil
}

// readRecordsV1 reads the records part of a version 1 snapshot. Its
// records carry no retention, so they are kept for ever, as the binary
// that wrote them promised.
func (m *Machine) readRecordsV1(r *wire.Reader) error {
	for n := r.Count(38); n > 0 && r.Err == nil; n-- {
		res := &Reservation{}
		readRequest(r, &res.ID, &res.UserID, &res.EventID, &res.AreaID, &res.Type, &res.NumOfSeats, &res.Seats)
		res.State, res.Reason = State(r.U8()), Reason(r.U8())
		res.ReasonA, res.ReasonB = r.I32(), r.I32()
		res.IdemKey = r.Str()
		fp := r.U64()
		if r.Err != nil {
			break
		}
		if err := m.restoreRecord(res, fp); err != nil {
			return err
		}
	}
	return nil
}

// readRecords reads the records part written by storeView.appendTo.
func (m *Machine) readRecords(r *wire.Reader) error {
	nn := r.Count(2)
	names := make([]areaKey, 0, nn)
	for ; nn > 0 && r.Err == nil; nn-- {
		names = append(names, areaKey{r.Str(), r.Str()})
	}
	for n := r.Count(25); n > 0 && r.Err == nil; n-- {
		res, fp, err := readRecord(r, names)
		if err != nil {
			return err
		}
		if r.Err != nil {
			break
		}
		if err := m.restoreRecord(res, fp); err != nil {
			return err
		}
	}
	return m.readPurgeQueue(r)
}

// readRecord reads one record of the records part and its idempotency
// fingerprint; names are the part's (event, area) pairs. A short read is
// left in r.Err.
func readRecord(r *wire.Reader, names []areaKey) (*Reservation, uint64, error) {
	res := &Reservation{}
	copy(res.ID[:], r.Next(16))
	if k := r.Uvarint(); k < uint64(len(names)) {
		res.EventID, res.AreaID = names[k].event, names[k].area
	} else if r.Err == nil {
		return nil, 0, fmt.Errorf("ticketing: snapshot record names area %d of %d", k, len(names))
	}
	res.UserID = r.Str()
	typ := r.U8()
	res.State, res.Reason = State(r.U8()), Reason(r.U8())
	res.NumOfSeats = int32(uint32(r.Uvarint()))
	a, b := int32(uint32(r.Uvarint())), int32(uint32(r.Uvarint()))
	if err := readRecordSeats(r, res, typ, a, b); err != nil {
		return nil, 0, err
	}
	if res.State == StateFailed {
		res.ReasonA, res.ReasonB = a, b
	}
	var fp uint64
	if res.IdemKey = r.Str(); res.IdemKey != "" {
		fp = r.U64()
	}
	return res, fp, nil
}

// readRecordSeats sets a record's type from its code typ, and its seats:
// a random pick's are a run from (row a, column b), a self pick's follow
// in r.
func readRecordSeats(r *wire.Reader, res *Reservation, typ uint8, a, b int32) error {
	switch typ {
	case typRandom:
		res.Type = TypeRandom
		if res.State != StateFailed && res.NumOfSeats > 0 && res.NumOfSeats <= MaxSeatsPerRequest {
			res.Seats = make([]Seat, res.NumOfSeats)
			for i := range res.Seats {
				res.Seats[i] = Seat{Row: a, Col: b + int32(i)}
			}
		}
	case typSelfPick:
		res.Type = TypeSelfPick
		if k := r.Count(2); k > 0 {
			res.Seats = make([]Seat, k)
			for i := range res.Seats {
				res.Seats[i] = Seat{Row: int32(uint32(r.Uvarint())), Col: int32(uint32(r.Uvarint()))}
			}
		}
	case typOther:
		res.Type = r.Str()
	default:
		if r.Err == nil {
			return fmt.Errorf("ticketing: snapshot record of unknown type %d", typ)
		}
	}
	return nil
}

// readPurgeQueue reads the records part's purge queue, in queue order,
// after its records.
func (m *Machine) readPurgeQueue(r *wire.Reader) error {
	for n := r.Count(9); n > 0 && r.Err == nil; n-- {
		k, at := r.Uvarint(), int64(r.U64())
		if r.Err != nil {
			break
		}
		// Restored records fill slots 0, 1, ... in order, so a record's
		// position in the snapshot is its slot.
		if k >= uint64(m.recs.recs.n) {
			return fmt.Errorf("ticketing: snapshot purge queue names record %d of %d", k, m.recs.recs.n)
		}
		if st := m.recs.recs.at(uint32(k)).state; st == StateReserved {
			return fmt.Errorf("ticketing: snapshot purge queue holds a RESERVED record")
		}
		m.recs.retire(uint32(k), at)
	}
	return nil
}

// restoreRecord checks a record read from a snapshot against the areas
// and stores it.
func (m *Machine) restoreRecord(res *Reservation, fp uint64) error {
	if res.State < StateReserved || res.State > StateCancelled {
		return fmt.Errorf("ticketing: snapshot has a reservation in unknown state %d", res.State)
	}
	if _, dup := m.recs.lookup(res.ID); dup {
		return fmt.Errorf("ticketing: snapshot has reservation %x twice", res.ID)
	}
	if len(res.UserID) > MaxNameLen {
		return fmt.Errorf("ticketing: snapshot has a user id of %d bytes", len(res.UserID))
	}
	if res.Type == TypeRandom && res.State != StateFailed && len(res.Seats) != int(res.NumOfSeats) {
		return fmt.Errorf("ticketing: snapshot has a %s RANDOM reservation of %d seats holding %d", res.State, res.NumOfSeats, len(res.Seats))
	}
	if res.Type == TypeRandom && len(res.Seats) > 0 {
		// Stored as one run in one row (records.go).
		for i, st := range res.Seats {
			if len(res.Seats) != int(res.NumOfSeats) || st != (Seat{Row: res.Seats[0].Row, Col: res.Seats[0].Col + int32(i)}) {
				return fmt.Errorf("ticketing: snapshot has a RANDOM reservation whose seats are not %d adjacent seats in one row", res.NumOfSeats)
			}
		}
	}
	if res.State == StateReserved {
		a := m.areas[areaKey{res.EventID, res.AreaID}]
		if a == nil {
			return fmt.Errorf("ticketing: snapshot has a reservation in unknown area %q/%q", res.EventID, res.AreaID)
		}
		for _, st := range res.Seats {
			if st.Row < 0 || int(st.Row) >= a.def.RowCount || st.Col < 0 || int(st.Col) >= a.def.ColCount || !a.isTaken(int(st.Row), int(st.Col)) {
				return fmt.Errorf("ticketing: snapshot has a reservation holding seat %d,%d that its area does not mark taken", st.Row, st.Col)
			}
		}
	}
	m.recs.add(res, fp)
	return nil
}
