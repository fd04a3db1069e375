package ticketing

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/engine"
	"github.com/surge-run/surge/internal/ids"
)

// Body size limits.
const (
	maxEventBody       = 1 << 20
	maxReservationBody = 16 << 10
	maxIdemKeyLen      = 255
)

// API serves the compatibility routes of the ticket-master system and
// Surge's native routes beside them.
type API struct {
	eng       *engine.Engine
	failed    failedCache
	lim       *limiter // nil: no limits
	retention time.Duration
	// large holds a turn per large answer being built or written: an
	// event of many areas, a page of events (oneOfFew).
	large *api.Turns
}

// manyAreas: an event of more areas than this is a large answer (about
// 1.6 KB and one engine query an area).
const manyAreas = 100

// oneOfFew runs h with one of as many turns as the server has cores. A
// field test's 1,024 streams of GET /v2/events/{id} for events of 1,000
// areas (1.6 MB and 1,000 engine queries each) took the server to
// 2.5–4 GB, and past --max-inflight its other clients waited seconds.
func (a *API) oneOfFew(w http.ResponseWriter, r *http.Request, h api.HandlerFunc) int {
	return a.large.Serve(w, r, h, "too many large event answers are being built or sent")
}

// DefaultRetention is how long a FAILED or CANCELLED reservation is kept
// (readable by id, its Idempotency-Key remembered) before it is purged.
const DefaultRetention = 15 * time.Minute

// NewAPI returns the ticketing HTTP API over eng, with DefaultRetention.
func NewAPI(eng *engine.Engine) *API {
	return &API{eng: eng, retention: DefaultRetention, large: api.NewLargeAnswerTurns()}
}

// SetRetention sets how long terminal reservations made from now on are
// kept; 0 keeps them for ever. Each command carries the retention it was
// made with, so changing it never changes what replay does.
func (a *API) SetRetention(d time.Duration) *API {
	a.retention = max(d, 0)
	return a
}

// Register adds the routes to mux.
func (a *API) Register(mux *http.ServeMux, m *api.Metrics) {
	m.HandleLean(mux, "POST /v1/event", a.createEvent)
	m.HandleLean(mux, "POST /v1/event/{id}/reservation", a.compatReserve)
	m.HandleLean(mux, "GET /v1/reservation/{id}", a.compatGet)
	m.HandleLean(mux, "POST /v2/reservations", a.nativeReserve)
	m.HandleLean(mux, "GET /v2/reservations/{id}", a.nativeGet)
	m.HandleLean(mux, "DELETE /v2/reservations/{id}", a.nativeCancel)
	m.HandleLean(mux, "GET /v2/events/{id}", a.getEvent)
	a.registerOps(mux, m)
	m.HandleFallback(mux)
}

func (a *API) eventPartition(name string) int {
	return engine.PartitionOfHash(engine.HashMore(engine.Hash("event\x00"), name), a.eng.Partitions())
}

func (a *API) areaPartition(event, area string) int {
	h := engine.HashMore(engine.HashMore(engine.Hash(event), "\x00"), area)
	return engine.PartitionOfHash(h, a.eng.Partitions())
}

// engineError maps engine failures to statuses a client can act on.
func engineError(w http.ResponseWriter, err error) int {
	return api.EngineError(w, err, "server is busy: this area has more requests queued than it can start soon; nothing was done, retry after the Retry-After pause")
}

// readJSON reads a size-limited body and decodes it into v. It returns a
// status other than 0 if it already answered.
var readJSON = api.ReadJSON

// The body checks are shared with the other workloads (internal/api).
var (
	decodeJSON   = api.DecodeJSON
	checkStrings = api.CheckStrings
	checkText    = api.CheckText
)

// Events.

func (a *API) createEvent(w http.ResponseWriter, r *http.Request) int {
	var def EventDef
	if st := readJSON(w, r, maxEventBody, &def); st != 0 {
		return st
	}
	if msg := validateEvent(&def); msg != "" {
		return api.Error(w, http.StatusBadRequest, msg)
	}
	ctx := r.Context()
	admitted, st := a.admitEvent(ctx, w, &def)
	if st != 0 {
		return st
	}
	res, err := engine.Do[*Result](ctx, a.eng, a.eventPartition(def.EventName), WorkloadID, &CreateEvent{Def: def})
	admitted(res, err)
	if err != nil {
		return engineError(w, err)
	}
	if res.Outcome == Conflict {
		return api.Error(w, http.StatusConflict, res.Msg)
	}
	// Create every area in its own partition; creation is idempotent, so a
	// client that retries after a partial failure completes the event.
	errs := make([]error, len(def.Areas))
	conflicts := make([]string, len(def.Areas))
	var wg sync.WaitGroup
	for i := range def.Areas {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			ar := def.Areas[i]
			res, err := engine.Do[*Result](ctx, a.eng, a.areaPartition(def.EventName, ar.AreaID), WorkloadID, &CreateArea{EventID: def.EventName, Area: ar})
			if err != nil {
				errs[i] = err
				return
			}
			if res.Outcome == Conflict || res.Outcome == Invalid {
				conflicts[i] = res.Msg
			}
		}(i)
	}
	wg.Wait()
	for i := range def.Areas {
		if errs[i] != nil {
			return engineError(w, errs[i])
		}
		if conflicts[i] != "" {
			return api.Error(w, http.StatusConflict, conflicts[i])
		}
	}
	body, _ := json.Marshal(&def)
	api.Write(w, http.StatusOK, true, body)
	return http.StatusOK
}

func validateEvent(d *EventDef) string {
	switch {
	case d.EventName == "":
		return "eventName is required"
	case len(d.EventName) > MaxNameLen:
		return fmt.Sprintf("eventName is longer than %d bytes", MaxNameLen)
	case len(d.Artist) > MaxNameLen:
		return fmt.Sprintf("artist is longer than %d bytes", MaxNameLen)
	case len(d.Areas) == 0:
		return "areas is required and must not be empty"
	case len(d.Areas) > MaxAreasPerEvent:
		return fmt.Sprintf("at most %d areas per event, got %d", MaxAreasPerEvent, len(d.Areas))
	}
	seen := make(map[string]bool, len(d.Areas))
	for i := range d.Areas {
		if msg := ValidateArea(&d.Areas[i]); msg != "" {
			return msg
		}
		if seen[d.Areas[i].AreaID] {
			return fmt.Sprintf("areaId %s appears twice", api.Quote(d.Areas[i].AreaID))
		}
		seen[d.Areas[i].AreaID] = true
	}
	for _, t := range []struct{ name, v string }{
		{"reservationOpeningTime", d.ReservationOpeningTime}, {"reservationClosingTime", d.ReservationClosingTime},
		{"eventStartTime", d.EventStartTime}, {"eventEndTime", d.EventEndTime},
	} {
		if t.v == "" {
			continue
		}
		if _, err := time.Parse(time.RFC3339Nano, t.v); err != nil {
			return fmt.Sprintf("%s must be an RFC 3339 instant such as 2026-01-02T15:04:05Z, got %s", t.name, api.Quote(t.v))
		}
	}
	return ""
}

func (a *API) getEvent(w http.ResponseWriter, r *http.Request) int {
	name := api.PathValue(w, r, "id")
	def, err := engine.Query[*EventDef](r.Context(), a.eng, a.eventPartition(name), WorkloadID, GetEvent{Name: name})
	if err != nil {
		return engineError(w, err)
	}
	if def == nil {
		return api.Error(w, http.StatusNotFound, "no event "+api.Quote(name))
	}
	if len(def.Areas) > manyAreas {
		return a.oneOfFew(w, r, func(w http.ResponseWriter, r *http.Request) int { return a.eventAnswer(w, r, def) })
	}
	return a.eventAnswer(w, r, def)
}

// eventAnswer answers GET /v2/events/{id} for the event def, with each
// area's seats.
func (a *API) eventAnswer(w http.ResponseWriter, r *http.Request, def *EventDef) int {
	name := def.EventName
	type areaView struct {
		AreaDef
		AvailableSeats int `json:"availableSeats"`
		ReservedSeats  int `json:"reservedSeats"`
	}
	out := struct {
		*EventDef
		Areas          []areaView `json:"areas"`
		AvailableSeats int        `json:"availableSeats"`
	}{EventDef: def, Areas: make([]areaView, len(def.Areas))}
	for i, ar := range def.Areas {
		info, err := engine.Query[AreaInfo](r.Context(), a.eng, a.areaPartition(name, ar.AreaID), WorkloadID, GetArea{EventID: name, AreaID: ar.AreaID})
		if err != nil {
			return engineError(w, err)
		}
		out.Areas[i] = areaView{AreaDef: ar, AvailableSeats: info.Available, ReservedSeats: info.Taken}
		out.AvailableSeats += info.Available
	}
	body, _ := json.Marshal(&out)
	api.Write(w, http.StatusOK, true, body)
	return http.StatusOK
}

// Reservations.

// reserveBody is the JSON both reservation routes accept.
type reserveBody struct {
	UserID     string `json:"userId"`
	EventID    string `json:"eventId"`
	AreaID     string `json:"areaId"`
	NumOfSeats int64  `json:"numOfSeats"`
	Seats      []Seat `json:"seats"`
	Type       string `json:"type"`
}

// reset empties a pooled body. The seats' array is zeroed, not only cut
// to length 0: encoding/json decodes an array into the elements it
// reuses without zeroing them, so a seat that leaves out a coordinate
// (which means 0) kept an earlier request's value, and its client was
// given a seat it did not ask for.
func (b *reserveBody) reset() {
	clear(b.Seats[:cap(b.Seats)])
	*b = reserveBody{Seats: b.Seats[:0]}
}

var reservePool = sync.Pool{New: func() any { return new(reserveBody) }}

// parseReserve reads and checks a reservation body. Limits apply to both
// APIs; the rules of the compatibility API (a FAILED record for a bad type
// or count) are left to the state machine.
func parseReserve(w http.ResponseWriter, r *http.Request, body *reserveBody, pathEvent string) int {
	if st := api.CheckBody(w, r, maxReservationBody); st != 0 {
		return st
	}
	buf := api.BodyPool.Get().(*bytes.Buffer)
	buf.Reset()
	defer api.BodyPool.Put(buf)
	if _, err := buf.ReadFrom(api.LimitedBody(w, r, maxReservationBody)); err != nil {
		return api.BodyError(w, err)
	}
	if !parseReserveFast(buf.Bytes(), body) {
		body.reset()
		// The fast path accepts only printable ASCII strings, so the
		// check of strings costs nothing on the common request.
		if msg := decodeJSON(buf.Bytes(), body); msg != "" {
			return api.Error(w, http.StatusBadRequest, msg)
		}
	}
	if body.EventID == "" && pathEvent != "" {
		// The peer reads eventId from the body only; fall back to the
		// path so a client that sets only the path still works.
		if msg := checkText(pathEvent); msg != "" {
			return api.Error(w, http.StatusBadRequest, "the event id in the path "+msg)
		}
		body.EventID = pathEvent
	}
	switch {
	case body.EventID == "":
		return api.Error(w, http.StatusBadRequest, "eventId is required")
	case body.AreaID == "":
		return api.Error(w, http.StatusBadRequest, "areaId is required")
	case len(body.EventID) > MaxNameLen || len(body.AreaID) > MaxNameLen || len(body.UserID) > MaxNameLen:
		return api.Error(w, http.StatusBadRequest, fmt.Sprintf("eventId, areaId and userId are at most %d bytes", MaxNameLen))
	case body.NumOfSeats > MaxSeatsPerRequest:
		return api.Error(w, http.StatusBadRequest, fmt.Sprintf("numOfSeats must be at most %d, got %d", MaxSeatsPerRequest, body.NumOfSeats))
	case body.NumOfSeats < -1<<31:
		return api.Error(w, http.StatusBadRequest, "numOfSeats is out of range")
	case len(body.Seats) > MaxSeatsPerRequest:
		return api.Error(w, http.StatusBadRequest, fmt.Sprintf("at most %d seats per reservation, got %d", MaxSeatsPerRequest, len(body.Seats)))
	case len(body.Type) > MaxNameLen:
		// A compatibility request with an unknown type becomes a FAILED
		// record that keeps the type; one this long is not a typo.
		return api.Error(w, http.StatusBadRequest, fmt.Sprintf("type must be %q or %q, got %s", TypeRandom, TypeSelfPick, api.Quote(body.Type)))
	}
	return 0
}

func (a *API) newReserve(b *reserveBody) (*Reserve, int) {
	part := a.areaPartition(b.EventID, b.AreaID)
	c := &Reserve{
		ID:         newID(part),
		UserID:     b.UserID,
		EventID:    b.EventID,
		AreaID:     b.AreaID,
		Type:       internType(b.Type),
		NumOfSeats: int32(b.NumOfSeats),
	}
	if len(b.Seats) > 0 {
		c.Seats = append([]Seat(nil), b.Seats...)
	}
	c.Retention = int64(a.retention)
	return c, part
}

func (a *API) compatReserve(w http.ResponseWriter, r *http.Request) int {
	body := reservePool.Get().(*reserveBody)
	defer reservePool.Put(body)
	body.reset()
	if st := parseReserve(w, r, body, api.PathValue(w, r, "id")); st != 0 {
		return st
	}
	cmd, part := a.newReserve(body)
	// The peer answers with the id at once and finishes later; Surge waits
	// until the reservation is final and durable, which costs the client
	// nothing and lets the GET that follows answer immediately.
	rr, err := engine.Do[*Result](r.Context(), a.eng, part, WorkloadID, cmd)
	if err != nil {
		return engineError(w, err)
	}
	if rr.Outcome != OK {
		return api.Error(w, http.StatusInternalServerError, "reservation not recorded: "+rr.Msg)
	}
	b := api.GetBuf()
	if rr.Res.State == StateFailed {
		// Rendered in the pooled buffer, kept at its exact size: one
		// allocation where growing from nil took four.
		*b = appendReservation(*b, &rr.Res)
		a.failed.put(rr.Res.ID, bytes.Clone(*b), rr.PurgeAt)
	}
	api.Write(w, http.StatusOK, false, formatID((*b)[:0], rr.Res.ID))
	api.PutBuf(b)
	return http.StatusOK
}

func (a *API) nativeReserve(w http.ResponseWriter, r *http.Request) int {
	idem, msg := idempotencyKey(r.Header["Idempotency-Key"])
	if msg != "" {
		return api.Error(w, http.StatusBadRequest, msg)
	}
	body := reservePool.Get().(*reserveBody)
	defer reservePool.Put(body)
	body.reset()
	if st := parseReserve(w, r, body, ""); st != 0 {
		return st
	}
	if body.Type != TypeRandom && body.Type != TypeSelfPick {
		return api.Error(w, http.StatusBadRequest, fmt.Sprintf("type must be %q or %q, got %s", TypeRandom, TypeSelfPick, api.Quote(body.Type)))
	}
	cmd, part := a.newReserve(body)
	cmd.Strict = true
	cmd.IdemKey = idem
	rr, err := engine.Do[*Result](r.Context(), a.eng, part, WorkloadID, cmd)
	if err != nil {
		return engineError(w, err)
	}
	switch rr.Outcome {
	case NotFound:
		return api.Error(w, http.StatusNotFound, rr.Msg)
	case Invalid:
		return api.Error(w, http.StatusBadRequest, rr.Msg)
	case Conflict:
		return api.Error(w, http.StatusUnprocessableEntity, rr.Msg)
	case Replayed:
		// Only reservations that were made are remembered, so the first
		// answer was 201; the body shows the reservation as it is now
		// (it may have been cancelled since).
		w.Header().Set("Idempotent-Replayed", "true")
		writeReservation(w, http.StatusCreated, &rr.Res)
		return http.StatusCreated
	}
	st := http.StatusCreated
	if rr.Res.State != StateReserved {
		st = http.StatusConflict
	}
	writeReservation(w, st, &rr.Res)
	return st
}

// lookup finds a reservation by the id in the path. An id that is not a
// UUID, or names a partition this server does not have, was never issued.
func (a *API) lookup(w http.ResponseWriter, r *http.Request) (*Result, int) {
	raw := api.PathValue(w, r, "id")
	id, ok := ids.Parse(raw)
	part := partitionOfID(id)
	if !ok || part >= a.eng.Partitions() {
		return nil, api.Error(w, http.StatusNotFound, "no reservation "+api.Quote(raw))
	}
	rr, err := engine.Query[*Result](r.Context(), a.eng, part, WorkloadID, GetReservation{ID: id})
	if err != nil {
		return nil, engineError(w, err)
	}
	if rr.Outcome == NotFound {
		return nil, api.Error(w, http.StatusNotFound, "no reservation "+api.Quote(raw))
	}
	return rr, 0
}

// compatGet is the peer's long poll. Reservations are final before their
// id is handed out, so it never has to wait.
func (a *API) compatGet(w http.ResponseWriter, r *http.Request) int {
	if id, ok := ids.Parse(api.PathValue(w, r, "id")); ok {
		if body, ok := a.failed.get(id, time.Now().UnixNano()); ok {
			api.Write(w, http.StatusOK, true, body)
			return http.StatusOK
		}
	}
	rr, st := a.lookup(w, r)
	if st != 0 {
		return st
	}
	writeReservation(w, http.StatusOK, &rr.Res)
	return http.StatusOK
}

func (a *API) nativeGet(w http.ResponseWriter, r *http.Request) int { return a.compatGet(w, r) }

func (a *API) nativeCancel(w http.ResponseWriter, r *http.Request) int {
	raw := api.PathValue(w, r, "id")
	id, ok := ids.Parse(raw)
	part := partitionOfID(id)
	if !ok || part >= a.eng.Partitions() {
		return api.Error(w, http.StatusNotFound, "no reservation "+api.Quote(raw))
	}
	rr, err := engine.Do[*Result](r.Context(), a.eng, part, WorkloadID, &Cancel{ID: id, Retention: int64(a.retention)})
	if err != nil {
		return engineError(w, err)
	}
	switch rr.Outcome {
	case NotFound:
		return api.Error(w, http.StatusNotFound, "no reservation "+api.Quote(raw))
	case Conflict:
		return api.Error(w, http.StatusConflict, rr.Msg)
	}
	writeReservation(w, http.StatusOK, &rr.Res)
	return http.StatusOK
}

func writeReservation(w http.ResponseWriter, status int, res *Reservation) {
	b := api.GetBuf()
	*b = appendReservation(*b, res)
	api.Write(w, status, true, *b)
	api.PutBuf(b)
}

func appendReservation(b []byte, res *Reservation) []byte {
	b = append(b, `{"reservationId":"`...)
	b = formatID(b, res.ID)
	b = append(b, `","userId":`...)
	b = api.AppendString(b, res.UserID)
	b = append(b, `,"eventId":`...)
	b = api.AppendString(b, res.EventID)
	b = append(b, `,"areaId":`...)
	b = api.AppendString(b, res.AreaID)
	b = append(b, `,"numOfSeats":`...)
	b = strconv.AppendInt(b, int64(res.NumOfSeats), 10)
	b = append(b, `,"numOfSeat":0,"type":`...)
	b = api.AppendString(b, res.Type)
	b = append(b, `,"seats":[`...)
	for i, s := range res.Seats {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"row":`...)
		b = strconv.AppendInt(b, int64(s.Row), 10)
		b = append(b, `,"col":`...)
		b = strconv.AppendInt(b, int64(s.Col), 10)
		b = append(b, '}')
	}
	b = append(b, `],"state":"`...)
	b = append(b, res.State.String()...)
	b = append(b, `","failedReason":`...)
	b = api.AppendString(b, res.FailedReason())
	return append(b, "}\n"...)
}

// Reservation ids are random version-4 UUIDs whose last two bytes hold the
// partition that keeps the record, so a lookup by id needs no index.
func newID(part int) [16]byte {
	id := ids.New()
	id[14], id[15] = byte(part>>8), byte(part)
	return id
}

func partitionOfID(id [16]byte) int { return int(id[14])<<8 | int(id[15]) }

// formatID writes the canonical UUID form; the zero id (a rejection that
// left no record) is written as nothing.
func formatID(b []byte, id [16]byte) []byte {
	if id == ([16]byte{}) {
		return b
	}
	return ids.UUID(id).Append(b)
}

// idempotencyKey reads the Idempotency-Key header (absent or empty: no
// key). The key is stored with the reservation and compared byte for
// byte, so it is held to what the header's specification allows:
// printable ASCII, one value.
func idempotencyKey(vals []string) (key, problem string) {
	switch {
	case len(vals) == 0:
		return "", ""
	case len(vals) > 1:
		return "", fmt.Sprintf("send one Idempotency-Key header, not %d", len(vals))
	case len(vals[0]) > maxIdemKeyLen:
		return "", fmt.Sprintf("Idempotency-Key is longer than %d bytes (%d)", maxIdemKeyLen, len(vals[0]))
	}
	for i := 0; i < len(vals[0]); i++ {
		if c := vals[0][i]; c < 0x20 || c > 0x7e {
			return "", fmt.Sprintf("Idempotency-Key must be printable ASCII (a UUID is a good key); byte %d is 0x%02x", i, c)
		}
	}
	return vals[0], ""
}
