package api

import (
	"context"
	"net/http"
	"time"
)

// Turns lets at most n callers at once do something costly (build a
// large answer, hold it until it is written); the others wait their
// turn, but not for ever: a turn that does not come within the patience
// is refused, so that clients that hold their turns (by not reading what
// they asked for) cannot keep every other caller waiting until its own
// client gives up.
type Turns struct {
	held     chan struct{}
	patience time.Duration
}

// NewTurns makes n turns, waited for at most patience each.
func NewTurns(n int, patience time.Duration) *Turns {
	return &Turns{held: make(chan struct{}, n), patience: patience}
}

// Take waits for a turn: true once the caller has one (it must Give it
// back), false if ctx ended or the patience ran out first.
func (t *Turns) Take(ctx context.Context) bool {
	select {
	case t.held <- struct{}{}:
		return true
	default:
	}
	wait := time.NewTimer(t.patience)
	defer wait.Stop()
	select {
	case t.held <- struct{}{}:
		return true
	case <-ctx.Done():
	case <-wait.C:
	}
	return false
}

// Give returns a turn taken.
func (t *Turns) Give() { <-t.held }

// Serve runs h with a turn; without one within the patience it answers
// 503 with Retry-After: 1, busy saying what is busy, and reads nothing.
func (t *Turns) Serve(w http.ResponseWriter, r *http.Request, h HandlerFunc, busy string) int {
	if !t.Take(r.Context()) {
		SetRetryAfter(w, time.Second)
		return Error(w, http.StatusServiceUnavailable, busy+"; nothing was read: retry after the Retry-After pause")
	}
	defer func() {
		if aw, ok := w.(afterWriter); !ok || !aw.afterWritten(t.Give) {
			t.Give()
		}
	}()
	return h(w, r)
}

// afterWriter is a ResponseWriter that writes a large answer after its
// handler returns (the lean HTTP/1.1 path): afterWritten(f) runs f once
// it is written, and says whether it took f. A turn is held until then,
// so that it bounds the answers held, not only those being built.
type afterWriter interface {
	afterWritten(f func()) bool
}
