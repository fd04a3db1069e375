package api

import (
	"context"
	"net/http"
	"runtime"
	"sync/atomic"
	"time"
)

// Turns lets at most n callers at once do something costly (build a
// large answer, hold it until it is written); the others wait their
// turn, but not for ever: a turn that does not come within the patience
// is refused, so that clients that hold their turns (by not reading what
// they asked for) cannot keep every other caller waiting until its own
// client gives up. A caller served by Serve gives its request's
// in-flight slot back while it waits (the lean servers' writers can):
// 4,096 streams of large answers waiting for two turns held every slot,
// so that small requests waited in the waiting room for the patience.
// And it does wait, rather than be refused at once: a crowd of clients
// that retry at once, refused, turned into a storm of refusals that took
// the CPU from the answers (27 written in 30 s, against 7,900 while they
// waited).
type Turns struct {
	held     chan struct{}
	patience time.Duration
	// waiting counts the callers waiting for a turn, at most maxWaiting
	// (each a goroutine and its request; beyond, refused at once).
	waiting    atomic.Int64
	maxWaiting int64
}

// waitersPerTurn bounds the callers that wait for a turn: on two cores
// as many as --max-inflight's default, since each one refused by it and
// retried at once is load (3,072 streams past 2,048 waiters kept a storm
// of 367,000 refusals going in a field test).
const waitersPerTurn = 2048

// LargeAnswerPatience is how long a large answer waits for its turn
// (NewLargeAnswerTurns) before it is refused: a turn is held until its
// answer is written, and clients that do not read hold theirs up to the
// stall rule.
const LargeAnswerPatience = 10 * time.Second

// NewLargeAnswerTurns makes the turns every workload's large answers take
// (lists, pages, large events): as many as the server has cores, waited
// for at most LargeAnswerPatience.
func NewLargeAnswerTurns() *Turns { return NewTurns(runtime.GOMAXPROCS(0), LargeAnswerPatience) }

// NewTurns makes n turns, waited for at most patience each, by at most
// waitersPerTurn callers a turn at once.
func NewTurns(n int, patience time.Duration) *Turns {
	return &Turns{held: make(chan struct{}, n), patience: patience, maxWaiting: int64(n * waitersPerTurn)}
}

// Take waits for a turn: true once the caller has one (it must Give it
// back), false if ctx ended or the patience ran out first, or if as
// many callers wait already as may.
func (t *Turns) Take(ctx context.Context) bool { return t.tryTake() || t.wait(ctx) }

func (t *Turns) tryTake() bool {
	select {
	case t.held <- struct{}{}:
		return true
	default:
		return false
	}
}

func (t *Turns) wait(ctx context.Context) bool {
	if t.waiting.Add(1) > t.maxWaiting {
		t.waiting.Add(-1)
		return false
	}
	defer t.waiting.Add(-1)
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
	if !t.tryTake() {
		if sr, ok := w.(slotReturner); ok {
			sr.returnSlot()
		}
		if !t.wait(r.Context()) {
			SetRetryAfter(w, time.Second)
			return Error(w, http.StatusServiceUnavailable, busy+"; nothing was read: retry after the Retry-After pause")
		}
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

// slotReturner is a ResponseWriter whose request can give its in-flight
// slot back before its handler returns, and go on without one: a turn
// (Turns) bounds what it does from then on.
type slotReturner interface {
	returnSlot()
}
