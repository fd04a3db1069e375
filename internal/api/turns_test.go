package api

import (
	"context"
	"testing"
	"time"
)

// Turns: at most n at once; a caller with no turn gives up at its
// patience or its context's end, and a turn given back is taken again.
func TestTurns(t *testing.T) {
	tu := NewTurns(2, 20*time.Millisecond)
	ctx := context.Background()
	for i := range 2 {
		if !tu.Take(ctx) {
			t.Fatalf("turn %d of two not taken", i+1)
		}
	}
	if tu.Take(ctx) {
		t.Fatal("a third turn taken")
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if NewTurns(1, time.Hour).Take(cancelled) != true {
		t.Fatal("a free turn refused to a cancelled caller: it is free, so it may be taken")
	}
	full := NewTurns(1, time.Hour)
	full.Take(ctx)
	if full.Take(cancelled) {
		t.Fatal("a turn taken past the limit by a cancelled caller")
	}
	got := make(chan bool)
	patient := &Turns{held: tu.held, patience: time.Minute, maxWaiting: 1} // the same turns, waited for longer
	go func() { got <- patient.Take(ctx) }()
	tu.Give()
	if !<-got {
		t.Fatal("a turn given back was not taken by the caller waiting")
	}
}

// At most waitersPerTurn callers a turn wait; the next is refused at
// once, however patient.
func TestTurnsBoundTheirWaiters(t *testing.T) {
	tu := NewTurns(1, time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	tu.Take(ctx)
	done := make(chan bool, waitersPerTurn)
	for range waitersPerTurn {
		go func() { done <- tu.Take(ctx) }()
	}
	waitFor(t, func() bool { return tu.waiting.Load() == waitersPerTurn })
	start := time.Now()
	if tu.Take(context.Background()) {
		t.Fatal("a turn taken past the bound of waiters")
	}
	if d := time.Since(start); d > hang {
		t.Fatalf("refused after %v, not at once", d)
	}
	cancel()
	for range waitersPerTurn {
		<-done
	}
	if n := tu.waiting.Load(); n != 0 {
		t.Fatalf("%d waiters counted after they all left", n)
	}
}
