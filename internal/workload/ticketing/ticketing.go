// Package ticketing is the flash-sale ticketing workload: events with areas
// of seat grids, and reservations that take seats in one area.
//
// The rules, all in this file:
//   - An event is created once; creating it again with the same definition
//     is a no-op, with a different one a conflict. Each area lives under its
//     own key (event, area), so every area is owned by exactly one
//     partition and a seat can never be sold twice.
//   - RANDOM with numOfSeats N takes the first run of N adjacent free seats
//     in one row, scanning rows from 0 and columns from 0 (first fit).
//   - SELF_PICK takes all listed seats or none.
//   - A reservation ends RESERVED (with its seats) or FAILED (with a
//     reason); a RESERVED one may later be CANCELLED, freeing its seats.
//   - A request with an idempotency key that was seen before (same user,
//     same area) returns the first result instead of reserving again.
//   - Strict (native API) requests that name no known area, are invalid,
//     or find no seats are answered without leaving a record (and without
//     a log write); compatibility requests leave a FAILED reservation that
//     can be read back by id, as the system they replace does.
//   - Only an OK outcome changes state; every other outcome is declared
//     Unchanged to the engine, which then does not log the command.
package ticketing

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/surge-run/surge/internal/engine"
)

// WorkloadID is written into every log record of this workload.
const WorkloadID uint8 = 1

// Limits, checked at the edge and again here.
const (
	MaxRows            = 1000
	MaxCols            = 1000
	MaxSeatsPerArea    = 100_000
	MaxAreasPerEvent   = 1000
	MaxSeatsPerRequest = 100
	MaxNameLen         = 256
)

// Type of reservation.
const (
	TypeRandom   = "RANDOM"
	TypeSelfPick = "SELF_PICK"
)

// State of a reservation.
type State uint8

const (
	StateReserved State = iota + 1
	StateFailed
	StateCancelled
)

func (s State) String() string {
	switch s {
	case StateReserved:
		return "RESERVED"
	case StateFailed:
		return "FAILED"
	case StateCancelled:
		return "CANCELLED"
	}
	return "UNKNOWN"
}

// Reason a reservation failed; rendered by Reservation.FailedReason.
type Reason uint8

const (
	ReasonNone Reason = iota
	ReasonInvalidArgument
	ReasonInvalidType
	ReasonInvalidEventArea
	ReasonInvalidSeat
	ReasonDuplicateSeat
	ReasonNotAvailable
	ReasonNoContinuous
	ReasonSoldOut
	ReasonSeatCount // SELF_PICK listing no seats or too many
	ReasonTooMany   // RANDOM asking for more than MaxSeatsPerRequest
)

// Seat is one place in an area's grid, both coordinates 0-based.
type Seat struct {
	Row int32 `json:"row"`
	Col int32 `json:"col"`
}

// AreaDef describes an area of an event.
type AreaDef struct {
	AreaID   string  `json:"areaId"`
	Price    float64 `json:"price"`
	RowCount int     `json:"rowCount"`
	ColCount int     `json:"colCount"`
}

// EventDef describes an event. Times are kept as the client sent them
// (validated RFC 3339) so the echo is exact.
type EventDef struct {
	EventName              string    `json:"eventName"`
	Artist                 string    `json:"artist"`
	Areas                  []AreaDef `json:"areas"`
	ReservationOpeningTime string    `json:"reservationOpeningTime,omitempty"`
	ReservationClosingTime string    `json:"reservationClosingTime,omitempty"`
	EventStartTime         string    `json:"eventStartTime,omitempty"`
	EventEndTime           string    `json:"eventEndTime,omitempty"`
}

func (d *EventDef) equal(o *EventDef) bool {
	if d.EventName != o.EventName || d.Artist != o.Artist || len(d.Areas) != len(o.Areas) ||
		d.ReservationOpeningTime != o.ReservationOpeningTime || d.ReservationClosingTime != o.ReservationClosingTime ||
		d.EventStartTime != o.EventStartTime || d.EventEndTime != o.EventEndTime {
		return false
	}
	for i := range d.Areas {
		if d.Areas[i] != o.Areas[i] {
			return false
		}
	}
	return true
}

// Reservation is the record of one reservation request.
type Reservation struct {
	ID         [16]byte
	UserID     string
	EventID    string
	AreaID     string
	Type       string
	NumOfSeats int32
	Seats      []Seat // immutable once set, so replies may share it
	State      State
	Reason     Reason
	ReasonA    int32 // reason arguments, e.g. N, or a seat's row and col
	ReasonB    int32
	IdemKey    string // the Idempotency-Key it was created with, if any
}

// FailedReason renders the reason; empty unless FAILED.
func (r *Reservation) FailedReason() string {
	switch r.Reason {
	case ReasonNone:
		return ""
	case ReasonInvalidArgument:
		return fmt.Sprintf("invalid argument: numOfSeats must be at least 1, got %d", r.ReasonA)
	case ReasonInvalidType:
		return fmt.Sprintf("invalid type %q: must be RANDOM or SELF_PICK", r.Type)
	case ReasonInvalidEventArea:
		return fmt.Sprintf("invalid event/area: event %q has no area %q", r.EventID, r.AreaID)
	case ReasonInvalidSeat:
		return fmt.Sprintf("invalid seat: row %d col %d is outside the area", r.ReasonA, r.ReasonB)
	case ReasonDuplicateSeat:
		return fmt.Sprintf("invalid seat: row %d col %d is listed twice", r.ReasonA, r.ReasonB)
	case ReasonNotAvailable:
		return fmt.Sprintf("seat row %d col %d is not available", r.ReasonA, r.ReasonB)
	case ReasonNoContinuous:
		return fmt.Sprintf("no %d continuous seats are available", r.ReasonA)
	case ReasonSoldOut:
		return "the area is sold out"
	case ReasonTooMany:
		return fmt.Sprintf("invalid argument: numOfSeats must be at most %d, got %d", MaxSeatsPerRequest, r.ReasonA)
	case ReasonSeatCount:
		return fmt.Sprintf("invalid argument: SELF_PICK must list 1 to %d seats, got %d", MaxSeatsPerRequest, r.ReasonA)
	}
	return "unknown reason"
}

// area is the seat grid of one area: a bitset of taken seats plus free
// counts per row and in total, so full rows and sold-out areas are skipped
// without scanning.
//
// The per-seat state exists only while some seat of the area is taken: a
// client may declare a thousand areas of 100,000 seats in one request, and
// what nobody has touched must cost neither memory nor snapshot bytes. A
// whole area rather than a row is the unit because a touched 100 x 1000
// area costs 12.7 KB, while per-row state would add a slice header (24 B)
// per row to every touched area for a saving only in areas touched in a
// few rows; the worst case is bounded by the server's seat limit anyway.
type area struct {
	eventID string
	def     AreaDef
	free    int
	rowFree []uint16 // nil while untouched; a row has at most MaxCols seats
	taken   []uint64 // nil while untouched; else row-major, rows*cols bits
}

func newArea(eventID string, def AreaDef) *area {
	return &area{eventID: eventID, def: def, free: def.RowCount * def.ColCount}
}

// touch allocates the per-seat state of an untouched area.
func (a *area) touch() {
	n := a.def.RowCount * a.def.ColCount
	a.taken = make([]uint64, (n+63)/64)
	a.rowFree = make([]uint16, a.def.RowCount)
	for r := range a.rowFree {
		a.rowFree[r] = uint16(a.def.ColCount)
	}
}

func (a *area) bit(r, c int) int { return r*a.def.ColCount + c }
func (a *area) isTaken(r, c int) bool {
	if a.taken == nil {
		return false
	}
	i := a.bit(r, c)
	return a.taken[i>>6]&(1<<(i&63)) != 0
}

func (a *area) rowFreeAt(r int) int {
	if a.rowFree == nil {
		return a.def.ColCount
	}
	return int(a.rowFree[r])
}

func (a *area) set(r, c int, taken bool) {
	if a.taken == nil {
		a.touch()
	}
	i := a.bit(r, c)
	if taken {
		a.taken[i>>6] |= 1 << (i & 63)
		a.rowFree[r]--
		a.free--
	} else {
		a.taken[i>>6] &^= 1 << (i & 63)
		a.rowFree[r]++
		a.free++
		if a.free == a.def.RowCount*a.def.ColCount {
			// Everything was given back: cost what an untouched area
			// costs. A forked snapshot holds its own copy of the bits.
			a.taken, a.rowFree = nil, nil
		}
	}
}

// firstFit finds the first run of n free adjacent seats in one row.
func (a *area) firstFit(n int) (row, col int, ok bool) {
	for r := 0; r < a.def.RowCount; r++ {
		if a.rowFreeAt(r) < n {
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

func (a *area) countTaken() int {
	n := 0
	for _, w := range a.taken {
		n += bits.OnesCount64(w)
	}
	return n
}

type areaKey struct{ event, area string }

type idemKey struct{ user, key string }

// Machine is the ticketing state of one partition.
type Machine struct {
	events map[string]*EventDef
	areas  map[areaKey]*area
	// recs holds the reservation records (records.go) in creation order,
	// which replay reproduces exactly, so a snapshot needs no sort.
	recs store
}

// NewMachine returns an empty state.
func NewMachine() *Machine {
	return &Machine{
		events: make(map[string]*EventDef),
		areas:  make(map[areaKey]*area),
		recs:   newStore(),
	}
}

// Outcome of a command, for the API layer to map to a status.
type Outcome uint8

const (
	OK       Outcome = iota // applied; for Reserve the record is in Res
	Same                    // create: identical definition already exists
	Replayed                // reserve: idempotency key seen, first result returned
	NotFound                // unknown event, area or reservation; nothing recorded
	Invalid                 // strict request rejected; nothing recorded
	Conflict                // different definition, key reuse with another request, cancel of a FAILED one
	Rejected                // strict reserve found no seats; Res says why; nothing recorded
)

// Result is the reply of every command.
type Result struct {
	Outcome Outcome
	Res     Reservation // copy, safe to read on another goroutine
	Msg     string
	// PurgeAt is when the record will be purged (engine clock, Unix ns),
	// set when this command made it terminal with a retention; else 0.
	PurgeAt int64
}

// Apply implements engine.Machine.
func (m *Machine) Apply(in *engine.Input, fx *engine.Effects) {
	var res *Result
	switch c := in.Cmd.(type) {
	case *CreateEvent:
		res = m.createEvent(c)
	case *CreateArea:
		res = m.createArea(c)
	case *Reserve:
		res = m.reserve(c, in.TimeNs, fx)
	case *Cancel:
		res = m.cancel(c, in.TimeNs, fx)
	case *Purge:
		if in.Kind != engine.FromTimer {
			res = &Result{Outcome: Invalid, Msg: "ticketing: purge is applied by its timer only"}
			break
		}
		res = m.purge(in.TimeNs, fx)
	default:
		res = &Result{Outcome: Invalid, Msg: fmt.Sprintf("ticketing: unknown command %T", in.Cmd)}
	}
	if res.Outcome != OK {
		fx.Unchanged()
	}
	fx.Reply(res)
}

func (m *Machine) createEvent(c *CreateEvent) *Result {
	if old, ok := m.events[c.Def.EventName]; ok {
		if old.equal(&c.Def) {
			return &Result{Outcome: Same}
		}
		return &Result{Outcome: Conflict, Msg: fmt.Sprintf("event %q already exists with a different definition", c.Def.EventName)}
	}
	d := c.Def
	d.Areas = append([]AreaDef(nil), c.Def.Areas...)
	m.events[d.EventName] = &d
	return &Result{Outcome: OK}
}

func (m *Machine) createArea(c *CreateArea) *Result {
	k := areaKey{c.EventID, c.Area.AreaID}
	if old, ok := m.areas[k]; ok {
		if old.def == c.Area {
			return &Result{Outcome: Same}
		}
		return &Result{Outcome: Conflict, Msg: fmt.Sprintf("area %q of event %q already exists with a different definition", c.Area.AreaID, c.EventID)}
	}
	if msg := ValidateArea(&c.Area); msg != "" {
		return &Result{Outcome: Invalid, Msg: msg}
	}
	m.areas[k] = newArea(c.EventID, c.Area)
	return &Result{Outcome: OK}
}

// ValidateArea returns a message if the area's grid is unusable.
func ValidateArea(a *AreaDef) string {
	switch {
	case a.AreaID == "" || len(a.AreaID) > MaxNameLen:
		return fmt.Sprintf("areaId must be 1..%d bytes", MaxNameLen)
	case a.RowCount < 1 || a.RowCount > MaxRows:
		return fmt.Sprintf("area %q: rowCount must be 1..%d, got %d", a.AreaID, MaxRows, a.RowCount)
	case a.ColCount < 1 || a.ColCount > MaxCols:
		return fmt.Sprintf("area %q: colCount must be 1..%d, got %d", a.AreaID, MaxCols, a.ColCount)
	case a.RowCount*a.ColCount > MaxSeatsPerArea:
		return fmt.Sprintf("area %q: at most %d seats per area, got %d", a.AreaID, MaxSeatsPerArea, a.RowCount*a.ColCount)
	case a.Price < 0 || a.Price != a.Price:
		return fmt.Sprintf("area %q: price must be a non-negative number", a.AreaID)
	}
	return ""
}

func (m *Machine) reserve(c *Reserve, now int64, fx *engine.Effects) *Result {
	if c.IdemKey != "" {
		if rid, ok := m.recs.idem[idemKey{c.UserID, c.IdemKey}]; ok {
			slot, _ := m.recs.lookup(rid)
			if m.recs.idemFP(slot) != c.fingerprint() {
				return &Result{Outcome: Conflict, Msg: "Idempotency-Key was already used for a different reservation request"}
			}
			return &Result{Outcome: Replayed, Res: m.recs.reservation(slot)}
		}
	}
	if _, dup := m.recs.lookup(c.ID); dup {
		return &Result{Outcome: Conflict, Msg: "reservation id already exists"}
	}
	r := &Reservation{ID: c.ID, UserID: c.UserID, EventID: c.EventID, AreaID: c.AreaID, Type: c.Type, NumOfSeats: c.NumOfSeats}
	a := m.areas[areaKey{c.EventID, c.AreaID}]
	switch {
	case a == nil:
		if c.Strict {
			return &Result{Outcome: NotFound, Msg: fmt.Sprintf("event %q has no area %q", c.EventID, c.AreaID)}
		}
		r.fail(ReasonInvalidEventArea, 0, 0)
	case c.Type == TypeRandom:
		m.reserveRandom(c, a, r)
	case c.Type == TypeSelfPick:
		m.reserveSelfPick(c, a, r)
	default:
		r.fail(ReasonInvalidType, 0, 0)
	}
	if c.Strict && r.isInvalid() {
		return &Result{Outcome: Invalid, Msg: r.FailedReason()}
	}
	if c.Strict && r.State == StateFailed {
		r.ID = [16]byte{}
		return &Result{Outcome: Rejected, Res: *r}
	}
	var fp uint64
	if c.IdemKey != "" {
		r.IdemKey, fp = c.IdemKey, c.fingerprint()
	}
	slot := m.recs.add(r, fp)
	res := &Result{Outcome: OK, Res: *r}
	if r.State == StateFailed {
		res.PurgeAt = m.retire(slot, now, c.Retention, fx)
	}
	return res
}

// Retention. A terminal record (a FAILED compat reservation, a cancelled
// one) is purged once its retention has passed; a RESERVED one is kept.
// The retention is carried in the logged Reserve or Cancel command (the
// API fills it in from --retention) and the purge time computed from it
// and the command's logged time, never from a setting of the process
// applying it: replay must purge exactly what the live run purged, even
// if the flag changed in between, and the engine's timer table, which
// replay rebuilds by re-running SetTimer, then gets the same deadlines.
//
// A timer per record would cost more than the record, so each partition
// keeps one queue of terminal records in the order they became terminal
// and one engine timer (purgeTimerID) armed for the head's time. When it
// fires (a logged FromTimer input), every due record is purged, at most
// maxPurgePerFiring at a time so a partition never stalls long, and the
// timer is re-armed for the new head (at once if more are due). If the
// retention is lowered, records made under the longer one hold back the
// ones queued behind them until they are due: a record is purged at or
// after its time, never before.
const (
	purgeTimerID      = "ticketing/purge"
	maxPurgePerFiring = 4096
)

// retire queues the record in slot for purging after retention (zero:
// kept for ever) and arms the purge timer if the queue was empty. It
// returns the purge time, or 0.
func (m *Machine) retire(slot uint32, now int64, retention int64, fx *engine.Effects) int64 {
	if retention <= 0 {
		return 0
	}
	at := now + retention
	if at < now {
		at = math.MaxInt64
	}
	if m.recs.retire(slot, at) {
		m.armPurge(at, fx)
	}
	return at
}

func (m *Machine) armPurge(at int64, fx *engine.Effects) {
	// Purge has no fields, so it always decodes and the id is short:
	// SetTimer cannot refuse it.
	if err := fx.SetTimer(purgeTimerID, at, &Purge{}); err != nil {
		panic(err)
	}
}

func (m *Machine) purge(now int64, fx *engine.Effects) *Result {
	n := m.recs.purge(now, maxPurgePerFiring)
	if at, ok := m.recs.next(); ok {
		// Due already only if the limit stopped this firing: then at once.
		m.armPurge(max(at, now), fx)
	}
	return &Result{Outcome: OK, Msg: fmt.Sprintf("purged %d records", n)}
}

func (r *Reservation) fail(why Reason, a, b int32) {
	r.State, r.Reason, r.ReasonA, r.ReasonB = StateFailed, why, a, b
}

// isInvalid tells a malformed request from one that merely lost the race.
func (r *Reservation) isInvalid() bool {
	switch r.Reason {
	case ReasonInvalidArgument, ReasonInvalidType, ReasonInvalidSeat, ReasonDuplicateSeat, ReasonSeatCount, ReasonTooMany:
		return true
	}
	return false
}

func (m *Machine) reserveRandom(c *Reserve, a *area, r *Reservation) {
	n := int(c.NumOfSeats)
	switch {
	case n <= 0:
		r.fail(ReasonInvalidArgument, c.NumOfSeats, 0)
		return
	case n > MaxSeatsPerRequest:
		// The API refuses these before they are logged; the rule is here
		// too because a record is stored as one run whose length the
		// snapshot bounds by this limit.
		r.fail(ReasonTooMany, c.NumOfSeats, 0)
		return
	case a.free == 0:
		r.fail(ReasonSoldOut, 0, 0)
		return
	}
	row, col, ok := a.firstFit(n)
	if !ok {
		r.fail(ReasonNoContinuous, c.NumOfSeats, 0)
		return
	}
	r.Seats = make([]Seat, n)
	for i := range n {
		a.set(row, col+i, true)
		r.Seats[i] = Seat{Row: int32(row), Col: int32(col + i)}
	}
	r.State = StateReserved
}

func (m *Machine) reserveSelfPick(c *Reserve, a *area, r *Reservation) {
	r.NumOfSeats = int32(len(c.Seats))
	if len(c.Seats) == 0 || len(c.Seats) > MaxSeatsPerRequest {
		r.fail(ReasonSeatCount, int32(len(c.Seats)), 0)
		return
	}
	for i, s := range c.Seats {
		if s.Row < 0 || int(s.Row) >= a.def.RowCount || s.Col < 0 || int(s.Col) >= a.def.ColCount {
			r.fail(ReasonInvalidSeat, s.Row, s.Col)
			return
		}
		for _, o := range c.Seats[:i] {
			if o == s {
				r.fail(ReasonDuplicateSeat, s.Row, s.Col)
				return
			}
		}
	}
	if a.free == 0 {
		r.fail(ReasonSoldOut, 0, 0)
		return
	}
	for _, s := range c.Seats {
		if a.isTaken(int(s.Row), int(s.Col)) {
			r.fail(ReasonNotAvailable, s.Row, s.Col)
			return
		}
	}
	r.Seats = append([]Seat(nil), c.Seats...)
	for _, s := range r.Seats {
		a.set(int(s.Row), int(s.Col), true)
	}
	r.State = StateReserved
}

func (m *Machine) cancel(c *Cancel, now int64, fx *engine.Effects) *Result {
	slot, ok := m.recs.lookup(c.ID)
	if !ok {
		return &Result{Outcome: NotFound, Msg: "no such reservation"}
	}
	r := m.recs.reservation(slot)
	switch r.State {
	case StateCancelled:
		return &Result{Outcome: Same, Res: r}
	case StateFailed:
		return &Result{Outcome: Conflict, Res: r, Msg: "a FAILED reservation holds no seats and cannot be cancelled"}
	}
	a := m.areas[areaKey{r.EventID, r.AreaID}]
	for _, s := range r.Seats {
		a.set(int(s.Row), int(s.Col), false)
	}
	m.recs.setState(slot, StateCancelled)
	r.State = StateCancelled
	return &Result{Outcome: OK, Res: r, PurgeAt: m.retire(slot, now, c.Retention, fx)}
}

// Queries.

// GetReservation asks for one reservation by id.
type GetReservation struct{ ID [16]byte }

// GetEvent asks for an event's definition.
type GetEvent struct{ Name string }

// GetArea asks for an area's availability.
type GetArea struct{ EventID, AreaID string }

// AreaInfo answers GetArea.
type AreaInfo struct {
	Found     bool
	Def       AreaDef
	Available int
	Taken     int
}

// Query implements engine.Machine.
func (m *Machine) Query(q any) any {
	switch q := q.(type) {
	case GetReservation:
		if slot, ok := m.recs.lookup(q.ID); ok {
			return &Result{Outcome: OK, Res: m.recs.reservation(slot)}
		}
		return &Result{Outcome: NotFound}
	case GetEvent:
		if d := m.events[q.Name]; d != nil {
			cp := *d
			cp.Areas = append([]AreaDef(nil), d.Areas...)
			return &cp
		}
		return (*EventDef)(nil)
	case GetArea:
		if a := m.areas[areaKey{q.EventID, q.AreaID}]; a != nil {
			return AreaInfo{Found: true, Def: a.def, Available: a.free, Taken: a.countTaken()}
		}
		return AreaInfo{}
	case GetUsage:
		return m.usage()
	}
	return m.opsQuery(q)
}

// Workload plugs ticketing into the engine.
type Workload struct{}

func (Workload) ID() uint8                               { return WorkloadID }
func (Workload) Name() string                            { return "ticketing" }
func (Workload) NewMachine(partition int) engine.Machine { return NewMachine() }

// WireTypes lists the queries and replies that cross between nodes in
// cluster mode (engine.WireTypes).
func (Workload) WireTypes() []any {
	return append([]any{&Result{}, GetReservation{}, GetEvent{}, GetArea{}, GetUsage{}, &EventDef{}, AreaInfo{}, Usage{}}, opsWireTypes()...)
}
