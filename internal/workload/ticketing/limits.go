package ticketing

import (
	"context"
	"fmt"
	"net/http"
	"sync"

	"github.com/surge-run/surge/internal/api"
	"github.com/surge-run/surge/internal/engine"
)

// Default server-wide limits (`surge serve --max-events --max-areas
// --max-seats`). With them the seat state of the worst case, every area
// touched, is bounded: 100 M seats are 12.5 MB of bits, and 20,000 areas
// have at most 20 M rows, 40 MB of row counters. One event of the largest
// legal size (1,000 areas of 100,000 seats) fits; the peer's full test
// (5 events x 80 areas x 400 seats) uses a fraction of each.
const (
	DefaultMaxEvents = 10_000
	DefaultMaxAreas  = 20_000
	DefaultMaxSeats  = 100_000_000
)

// Limits bound how many events, areas (over all events) and seats (over
// all areas) this server holds. Zero means no limit.
type Limits struct {
	Events, Areas, Seats int
}

// Usage is what the events a server holds declare.
type Usage struct {
	Events, Areas, Seats int
}

// GetUsage asks a partition what the events it holds declare.
type GetUsage struct{}

func (m *Machine) usage() Usage {
	u := Usage{Events: len(m.events)}
	for _, d := range m.events {
		u.Areas += len(d.Areas)
		u.Seats += seatsOf(d)
	}
	return u
}

func seatsOf(d *EventDef) int {
	n := 0
	for i := range d.Areas {
		n += d.Areas[i].RowCount * d.Areas[i].ColCount
	}
	return n
}

// limiter checks new events against the limits.
//
// The check is made here, before the command is logged, and never inside
// Machine.Apply: the limits are flags, and a check in Apply would make the
// replay of an accepted event give a different result after an operator
// lowered a limit. Totals are server-wide while events live in different
// partitions, so no single machine could check them anyway.
//
// Creating events is rare, so creations are serialised: the check and the
// creation it allows are one step, and the counts are exact. They are
// counted from every partition when unknown: at start, and after a
// creation whose outcome is unknown (an engine error or a cancelled
// request may or may not have applied it).
type limiter struct {
	limits Limits
	mu     sync.Mutex
	known  bool
	used   Usage
}

// SetLimits sets the limits for event creation (zero fields: no limit) and
// returns what the server already holds. Call it before serving.
func (a *API) SetLimits(ctx context.Context, l Limits) (Usage, error) {
	a.lim = &limiter{limits: l}
	a.lim.mu.Lock()
	defer a.lim.mu.Unlock()
	err := a.lim.count(ctx, a)
	return a.lim.used, err
}

func (l *limiter) count(ctx context.Context, a *API) error {
	var total Usage
	for p := range a.eng.Partitions() {
		u, err := engine.Query[Usage](ctx, a.eng, p, WorkloadID, GetUsage{})
		if err != nil {
			return err
		}
		total.Events += u.Events
		total.Areas += u.Areas
		total.Seats += u.Seats
	}
	l.used, l.known = total, true
	return nil
}

// exceeds names the first limit def would pass, with the flag that sets
// it, or returns "".
func (l *limiter) exceeds(def *EventDef) string {
	need := Usage{Events: 1, Areas: len(def.Areas), Seats: seatsOf(def)}
	for _, c := range []struct {
		limit, used, need int
		what, flag, env   string
	}{
		{l.limits.Events, l.used.Events, need.Events, "events", "--max-events", "SURGE_MAX_EVENTS"},
		{l.limits.Areas, l.used.Areas, need.Areas, "areas", "--max-areas", "SURGE_MAX_AREAS"},
		{l.limits.Seats, l.used.Seats, need.Seats, "seats", "--max-seats", "SURGE_MAX_SEATS"},
	} {
		if c.limit > 0 && c.used+c.need > c.limit {
			return fmt.Sprintf("this server holds at most %d %s (%s, %s); it holds %d and event %q declares %d more. Nothing was created; an operator can raise %s",
				c.limit, c.what, c.flag, c.env, c.used, def.EventName, c.need, c.flag)
		}
	}
	return ""
}

// admitEvent checks def against the limits before it is submitted. If it
// answered the request itself it returns a status; otherwise the caller
// must call done with the outcome of the CreateEvent command.
func (a *API) admitEvent(ctx context.Context, w http.ResponseWriter, def *EventDef) (done func(res any, err error), status int) {
	l := a.lim
	if l == nil {
		return func(any, error) {}, 0
	}
	l.mu.Lock()
	if !l.known {
		if err := l.count(ctx, a); err != nil {
			l.mu.Unlock()
			return nil, engineError(w, err)
		}
	}
	if msg := l.exceeds(def); msg != "" {
		// An event that exists already adds nothing: an identical one is a
		// retry and gets its usual answer, a different one its conflict.
		existing, err := engine.Query[*EventDef](ctx, a.eng, a.eventPartition(def.EventName), WorkloadID, GetEvent{Name: def.EventName})
		if err != nil {
			l.mu.Unlock()
			return nil, engineError(w, err)
		}
		if existing == nil {
			l.mu.Unlock()
			return nil, api.Error(w, http.StatusConflict, msg)
		}
	}
	return func(res any, err error) {
		defer l.mu.Unlock()
		switch {
		case err != nil:
			l.known = false
		case res.(*Result).Outcome == OK:
			l.used.Events++
			l.used.Areas += len(def.Areas)
			l.used.Seats += seatsOf(def)
		}
	}, 0
}
