package api

import (
	"sync/atomic"

	"golang.org/x/net/http2"
)

// Parking a lean stream (park.go): a lean-route stream that must wait for
// an in-flight slot gives its handler goroutine back at once and waits as
// its record. The room may hand it the slot, or learn its client has
// gone, while the goroutine that parked it is still returning; so the
// writer's park state says which of the two goroutines continues:
//
//	parkNone ──park──▶ parkParked ──handler returns──▶ parkReturned ──resume──▶ a worker runs it
//	                        └──────resume first──▶ parkResumed ──handler returns──▶ it runs it inline
const (
	parkNone = iota
	parkParked
	parkReturned
	parkResumed
)

// h2Parking is an h2Writer's park state.
type h2Parking struct {
	state atomic.Int32
	run   func() // what resume was given; nil: end unanswered
}

// park lets the waiting room hold a lean stream without its goroutine.
// Other streams may stream their body or be long-lived, so they wait as
// net/http's do, on their goroutine (a nil resume).
func (w *h2Writer) park() func(func()) {
	if !w.st.lean || w.wroteHeader {
		return nil
	}
	w.parking.state.Store(parkParked)
	return w.resume
}

// resume hands the parked stream on: to the goroutine that parked it if
// that has not returned yet, otherwise to a handler goroutine.
func (w *h2Writer) resume(run func()) {
	w.parking.run = run
	if w.parking.state.CompareAndSwap(parkParked, parkResumed) {
		return // returnParked runs it
	}
	st := w.st
	if run == nil {
		st.c.endUnanswered(st)
		return
	}
	st.resumed = true
	st.c.h.run(st)
}

// returnParked is called on the handler's goroutine when its handler
// returns. parked: the stream is not this goroutine's to finish. If the
// room resumed it meanwhile, run is for this goroutine to do before it
// finishes the stream as any other.
func (w *h2Writer) returnParked() (run func(), parked bool) {
	if w.parking.state.Load() == parkNone {
		return nil, false
	}
	if w.parking.state.CompareAndSwap(parkParked, parkReturned) {
		return nil, true
	}
	w.parking.state.Store(parkNone)
	if w.parking.run == nil {
		w.st.c.endUnanswered(w.st)
		return nil, true
	}
	return w.parking.run, false
}

// endUnanswered ends a parked stream whose client went away: nothing is
// written but the reset, if the stream is still open.
func (c *h2Conn) endUnanswered(st *h2Stream) {
	c.mu.Lock()
	c.resetLocked(st, http2.ErrCodeCancel, nil)
	c.mu.Unlock()
	st.cancel()
	c.kick(false)
}
