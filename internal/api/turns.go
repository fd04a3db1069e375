package api

import (
	"context"
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
