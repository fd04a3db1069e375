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
	patient := &Turns{held: tu.held, patience: time.Minute} // the same turns, waited for longer
	go func() { got <- patient.Take(ctx) }()
	tu.Give()
	if !<-got {
		t.Fatal("a turn given back was not taken by the caller waiting")
	}
}
