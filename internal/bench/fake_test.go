package bench

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
)

// fakeTicketing is a minimal in-memory ticketing server with the real
// server's routes and answers, so the generator's checks can be tested
// without the engine. With doubleBook set it gives every request the same
// seats, the bug the checker exists for.
type fakeTicketing struct {
	doubleBook bool

	mu     sync.Mutex
	events map[string]map[string][][]bool // event -> area -> grid
	res    map[string]fakeReservation
	seq    atomic.Int64
}

type fakeReservation struct {
	ReservationID string `json:"reservationId"`
	UserID        string `json:"userId"`
	EventID       string `json:"eventId"`
	AreaID        string `json:"areaId"`
	NumOfSeats    int    `json:"numOfSeats"`
	NumOfSeat     int    `json:"numOfSeat"`
	Type          string `json:"type"`
	Seats         []Seat `json:"seats"`
	State         string `json:"state"`
	FailedReason  string `json:"failedReason"`
}

func newFakeTicketing() *fakeTicketing {
	return &fakeTicketing{events: map[string]map[string][][]bool{}, res: map[string]fakeReservation{}}
}

func (f *fakeTicketing) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/health_check", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("POST /v1/event", func(w http.ResponseWriter, r *http.Request) {
		var ev struct {
			EventName string `json:"eventName"`
			Areas     []struct {
				AreaID   string `json:"areaId"`
				RowCount int    `json:"rowCount"`
				ColCount int    `json:"colCount"`
			} `json:"areas"`
		}
		if err := json.NewDecoder(r.Body).Decode(&ev); err != nil || ev.EventName == "" || len(ev.Areas) == 0 {
			http.Error(w, "bad event", http.StatusBadRequest)
			return
		}
		areas := map[string][][]bool{}
		for _, a := range ev.Areas {
			g := make([][]bool, a.RowCount)
			for i := range g {
				g[i] = make([]bool, a.ColCount)
			}
			areas[a.AreaID] = g
		}
		f.mu.Lock()
		f.events[ev.EventName] = areas
		f.mu.Unlock()
		_ = json.NewEncoder(w).Encode(ev)
	})
	mux.HandleFunc("POST /v1/event/{id}/reservation", func(w http.ResponseWriter, r *http.Request) {
		res, ok := f.reserve(w, r)
		if !ok {
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprint(w, res.ReservationID)
	})
	mux.HandleFunc("GET /v1/reservation/{id}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		res, ok := f.res[r.PathValue("id")]
		f.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(res)
	})
	mux.HandleFunc("POST /v2/reservations", func(w http.ResponseWriter, r *http.Request) {
		res, ok := f.reserve(w, r)
		if !ok {
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if res.State == "RESERVED" {
			w.WriteHeader(http.StatusCreated)
		} else {
			w.WriteHeader(http.StatusConflict)
		}
		_ = json.NewEncoder(w).Encode(res)
	})
	return mux
}

func (f *fakeTicketing) reserve(w http.ResponseWriter, r *http.Request) (fakeReservation, bool) {
	var res fakeReservation
	if err := json.NewDecoder(r.Body).Decode(&res); err != nil {
		http.Error(w, "bad reservation", http.StatusBadRequest)
		return res, false
	}
	res.ReservationID = fmt.Sprintf("00000000-0000-4000-8000-%012d", f.seq.Add(1))
	res.Seats = []Seat{}
	f.mu.Lock()
	defer f.mu.Unlock()
	grid := f.events[res.EventID][res.AreaID]
	res.State, res.FailedReason = "FAILED", fmt.Sprintf("no %d continuous seats", res.NumOfSeats)
	switch {
	case grid == nil:
		res.FailedReason = "invalid event or area"
	case f.doubleBook:
		for c := range res.NumOfSeats {
			res.Seats = append(res.Seats, Seat{Row: 0, Col: c})
		}
		res.State, res.FailedReason = "RESERVED", ""
	default:
	rows:
		for row := range grid {
			run := 0
			for col := range grid[row] {
				if grid[row][col] {
					run = 0
					continue
				}
				if run++; run == res.NumOfSeats {
					for c := col - run + 1; c <= col; c++ {
						grid[row][c] = true
						res.Seats = append(res.Seats, Seat{Row: row, Col: c})
					}
					res.State, res.FailedReason = "RESERVED", ""
					break rows
				}
			}
		}
	}
	f.res[res.ReservationID] = res
	return res, true
}
