package api

import (
	"context"
	"net/http"
	"sync/atomic"
)

// Parking: a request that waits for an in-flight slot without a goroutine.
//
// A request waiting in the room on net/http holds its handler's goroutine
// (and net/http's stream buffers) the whole wait: ≈ 10 KB per waiter that
// the collector scans on every cycle while a flash crowd waits. A server
// whose streams can outlive their handler's goroutine (the lean HTTP/2
// server's, on lean routes) gives the room a parkingWriter instead: the
// handler's goroutine returns at once, and the request waits as its
// stream's record and a waiter. When the room hands it a slot, the rest
// of the handler chain runs on a goroutine of the writer's.

// parkingWriter is a ResponseWriter whose request may wait without its
// goroutine.
type parkingWriter interface {
	http.ResponseWriter
	// park keeps the request's stream and context alive after its handler
	// returns, answered by nothing yet. resume(run) then runs run on
	// another goroutine (or the handler's, if it has not returned yet) and
	// ends the stream as a handler's return would; resume(nil) ends it
	// unanswered (its client has gone). Exactly one resume follows each
	// park. A nil resume: this request cannot be parked; it waits on its
	// goroutine.
	park() (resume func(run func()))
}

// noParkingKey marks a request's context: it waits on its goroutine.
type noParkingKey struct{}

// NoParking returns r marked to wait for its in-flight slot on its own
// goroutine, never parked. A gate that counts a call until its handler
// returns (the auth gate's long-lived calls against a token's limit)
// marks it: parked, the handler would return while the call still waits,
// and the count would drop with the call still open.
func NoParking(r *http.Request) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), noParkingKey{}, true))
}

// mayPark: w can hold r without its goroutine, and r may be held so.
func mayPark(w http.ResponseWriter, r *http.Request) (parkingWriter, bool) {
	pw, ok := w.(parkingWriter)
	return pw, ok && r.Context().Value(noParkingKey{}) == nil
}

// park queues r for a slot without holding the calling goroutine: resume,
// from pw.park, runs next once the room grants one.
func (l *inflightLimiter) park(pw parkingWriter, resume func(func()), r *http.Request, next http.Handler) {
	wt := &waiter{}
	var stopLeave atomic.Value // func() bool, once registered
	wt.run = func() {
		resume(func() {
			// Served, the request no longer needs its client-gone
			// callback, which would otherwise run when its stream ends:
			// a goroutine and a turn on the room's lock per request.
			// (Granted before it was registered, it runs, finds the
			// grant and does nothing.)
			if stop, ok := stopLeave.Load().(func() bool); ok {
				stop()
			}
			l.outcomes[waitServed].Add(1)
			l.runHolding(pw, r, next)
		})
	}
	switch l.enter(pw, r, wt) {
	case entered:
		resume(func() {
			l.runHolding(pw, r, next)
		})
		return
	case refused:
		resume(func() {}) // answered by enter
		return
	}
	// wt.run may have been called already (the room granted at once):
	// then leaveParked finds it granted and does nothing.
	stopLeave.Store(context.AfterFunc(r.Context(), func() { l.leaveParked(wt, resume) }))
}

// leaveParked takes a parked request whose client went away out of the
// room. One that was granted a slot meanwhile is served (its handler sees
// the cancelled context) and releases the slot itself.
func (l *inflightLimiter) leaveParked(wt *waiter, resume func(func())) {
	if l.unlinkUnlessGranted(wt) {
		return
	}
	l.outcomes[waitClientGone].Add(1)
	resume(nil)
}
