package ticketing

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"maps"
	"net/http"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/engine"
)

// Operator reads (docs/API.md, Operator reads): the events list with
// sell-through and an area's seat map.

// Events list page sizes.
const (
	DefaultEventsPage = 20
	MaxEventsPage     = 100
)

// ListEvents asks a partition for its events named above After, at most
// Limit, by name.
type ListEvents struct {
	After string
	Limit int
}

// AreaSold asks a partition for the sold and total seats of its areas
// among Keys (an absent area counts nothing).
type AreaSold struct{ Keys []AreaRef }

// AreaRef names an area of an event.
type AreaRef struct{ EventID, AreaID string }

// SoldCount answers AreaSold, in the order of its keys.
type SoldCount struct{ Sold, Seats []int }

// GetSeatMap asks for an area's seats.
type GetSeatMap struct{ EventID, AreaID string }

// SeatMap answers GetSeatMap: Bitmap has bit row·cols+col set for a sold
// seat (least significant bit first); Found is false for an unknown area.
type SeatMap struct {
	Found  bool
	Def    AreaDef
	Sold   int
	Bitmap []byte
}

func opsWireTypes() []any {
	return []any{ListEvents{}, []EventDef{}, AreaSold{}, SoldCount{}, GetSeatMap{}, &SeatMap{}}
}

// opsQuery answers the operator reads' queries (nil for any other).
func (m *Machine) opsQuery(q any) any {
	switch q := q.(type) {
	case ListEvents:
		names := api.Smallest(maps.Keys(m.events), q.After, q.Limit)
		out := make([]EventDef, len(names))
		for i, n := range names {
			out[i] = *m.events[n]
			out[i].Areas = append([]AreaDef(nil), m.events[n].Areas...)
		}
		return out
	case AreaSold:
		out := SoldCount{Sold: make([]int, len(q.Keys)), Seats: make([]int, len(q.Keys))}
		for i, k := range q.Keys {
			if a := m.areas[areaKey{k.EventID, k.AreaID}]; a != nil {
				out.Seats[i] = a.def.RowCount * a.def.ColCount
				out.Sold[i] = out.Seats[i] - a.free
			}
		}
		return out
	case GetSeatMap:
		a := m.areas[areaKey{q.EventID, q.AreaID}]
		if a == nil {
			return &SeatMap{}
		}
		n := a.def.RowCount * a.def.ColCount
		sm := &SeatMap{Found: true, Def: a.def, Sold: n - a.free, Bitmap: make([]byte, (n+7)/8)}
		var word [8]byte
		for i, w := range a.taken { // nil while untouched: all free
			binary.LittleEndian.PutUint64(word[:], w)
			copy(sm.Bitmap[i*8:], word[:])
		}
		return sm
	}
	return nil
}

func (a *API) registerOps(mux *http.ServeMux, m *api.Metrics) {
	m.Handle(mux, "GET /v2/events", func(w http.ResponseWriter, r *http.Request) int { return a.oneOfFew(w, r, a.listEvents) })
	m.Handle(mux, "GET /v2/events/{id}/areas/{area}/seats", a.seatMap)
}

type eventSummary struct {
	EventName              string  `json:"eventName"`
	Artist                 string  `json:"artist"`
	Areas                  int     `json:"areas"`
	Seats                  int     `json:"seats"`
	Sold                   int     `json:"sold"`
	Available              int     `json:"available"`
	SellThrough            float64 `json:"sellThrough"`
	ReservationOpeningTime string  `json:"reservationOpeningTime,omitempty"`
	ReservationClosingTime string  `json:"reservationClosingTime,omitempty"`
	EventStartTime         string  `json:"eventStartTime,omitempty"`
	EventEndTime           string  `json:"eventEndTime,omitempty"`
}

func (a *API) listEvents(w http.ResponseWriter, r *http.Request) int {
	p, ok := api.ParsePage(w, r, DefaultEventsPage, MaxEventsPage, MaxNameLen)
	if !ok {
		return http.StatusBadRequest
	}
	parts, err := engine.QueryAll[[]EventDef](r.Context(), a.eng, WorkloadID, ListEvents{After: p.After, Limit: p.Limit + 1})
	if err != nil {
		return engineError(w, err)
	}
	page, next := api.MergePage(parts, func(d EventDef) string { return d.EventName }, p.Limit)
	out := struct {
		Events []eventSummary `json:"events"`
		Next   string         `json:"next,omitempty"`
	}{Events: make([]eventSummary, len(page)), Next: next}
	for i, d := range page {
		out.Events[i] = eventSummary{EventName: d.EventName, Artist: d.Artist, Areas: len(d.Areas),
			ReservationOpeningTime: d.ReservationOpeningTime, ReservationClosingTime: d.ReservationClosingTime,
			EventStartTime: d.EventStartTime, EventEndTime: d.EventEndTime}
	}
	if err := a.fillSold(r, page, out.Events); err != nil {
		return engineError(w, err)
	}
	body, _ := json.Marshal(&out)
	api.Write(w, http.StatusOK, true, body)
	return http.StatusOK
}

// fillSold adds each event's seats and sold seats, asking each partition
// once for all the page's areas it holds.
func (a *API) fillSold(r *http.Request, page []EventDef, out []eventSummary) error {
	keys := map[int][]AreaRef{}
	refs := map[int][]int{}
	for i, d := range page {
		for _, ar := range d.Areas {
			p := a.areaPartition(d.EventName, ar.AreaID)
			keys[p] = append(keys[p], AreaRef{d.EventName, ar.AreaID})
			refs[p] = append(refs[p], i)
		}
	}
	for p, ks := range keys {
		c, err := engine.Query[SoldCount](r.Context(), a.eng, p, WorkloadID, AreaSold{Keys: ks})
		if err != nil {
			return err
		}
		for j, i := range refs[p] {
			out[i].Seats += c.Seats[j]
			out[i].Sold += c.Sold[j]
		}
	}
	for i := range out {
		out[i].Available = out[i].Seats - out[i].Sold
		if out[i].Seats > 0 {
			out[i].SellThrough = float64(out[i].Sold) / float64(out[i].Seats)
		}
	}
	return nil
}

func (a *API) seatMap(w http.ResponseWriter, r *http.Request) int {
	ev, ar := r.PathValue("id"), r.PathValue("area")
	sm, err := engine.Query[*SeatMap](r.Context(), a.eng, a.areaPartition(ev, ar), WorkloadID, GetSeatMap{EventID: ev, AreaID: ar})
	if err != nil {
		return engineError(w, err)
	}
	if sm == nil || !sm.Found {
		return api.Error(w, http.StatusNotFound, "no area "+api.Quote(ar)+" in event "+api.Quote(ev))
	}
	seats := sm.Def.RowCount * sm.Def.ColCount
	body, _ := json.Marshal(map[string]any{
		"eventId": ev, "areaId": ar, "rowCount": sm.Def.RowCount, "colCount": sm.Def.ColCount,
		"seats": seats, "sold": sm.Sold, "available": seats - sm.Sold,
		"encoding": "bitmap-base64", "bitmap": base64.StdEncoding.EncodeToString(sm.Bitmap),
	})
	api.Write(w, http.StatusOK, true, body)
	return http.StatusOK
}
