package api

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestSlotRetryGivesEachRefusalItsTurn: refusals are spaced one release
// interval apart (MinRetryDelay before any interval is known), the
// interval follows the observed releases, a turn never lies beyond
// MaxSlotRetry, and turns that have passed are not counted again.
func TestSlotRetryGivesEachRefusalItsTurn(t *testing.T) {
	now := time.Unix(1000, 0)
	s := &SlotRetry{nowFunc: func() time.Time { return now }}
	for i, want := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second} {
		if got := s.Refused(); got != want {
			t.Fatalf("refusal %d before any release: %v, want %v", i, got, want)
		}
	}
	// Releases every 200 ms; the old turns (up to 3 s ahead) pass first.
	for range 20 {
		now = now.Add(200 * time.Millisecond)
		s.Released()
	}
	for i, want := range []time.Duration{200 * time.Millisecond, 400 * time.Millisecond} {
		if got := s.Refused(); got != want {
			t.Fatalf("refusal %d with releases every 200 ms: %v, want %v", i, got, want)
		}
	}
	for range 1000 {
		s.Refused()
	}
	if got := s.Refused(); got != MaxSlotRetry {
		t.Fatalf("after a thousand refusals: %v, want the cap %v", got, MaxSlotRetry)
	}
}

// TestSlotRetryLearnsFromCountedReleases: releases counted by the
// caller and recorded together teach the same interval as one call per
// release: the time between records over the releases counted.
func TestSlotRetryLearnsFromCountedReleases(t *testing.T) {
	now := time.Unix(1000, 0)
	s := &SlotRetry{nowFunc: func() time.Time { return now }}
	s.ReleasedMany(5) // the first record only starts the clock
	if got := s.Refused(); got != MinRetryDelay {
		t.Fatalf("refusal after one record: %v, want %v", got, MinRetryDelay)
	}
	now = now.Add(2 * time.Second) // past the turn handed out
	s.ReleasedMany(0)              // nothing counted: nothing learnt
	// The average moves a quarter of the way with each record.
	for range 30 {
		now = now.Add(time.Second)
		s.ReleasedMany(20) // every 50 ms
	}
	if got := s.Refused(); got < 49*time.Millisecond || got > 51*time.Millisecond {
		t.Fatalf("refusal with 20 releases a second: %v, want about 50 ms", got)
	}
}

// TestBudgetRefusalPredictsItsWait: a wait for room in a byte budget
// (bodies, streams) that runs out is refused with the time its queue
// would take to drain at the rate bytes were freed while it waited: here
// 80 bytes queued while 40 were freed, twice the wait; not a fixed 1 s.
func TestBudgetRefusalPredictsItsWait(t *testing.T) {
	errFull := errors.New("full")
	b := new(budget).init(100)
	ctx := context.Background()
	if _, err := b.acquire(ctx, 60, time.Second, errFull); err != nil {
		t.Fatal(err)
	}
	if _, err := b.acquire(ctx, 40, time.Second, errFull); err != nil {
		t.Fatal(err)
	}
	const patience = 200 * time.Millisecond
	start := time.Now()
	done := make(chan error, 1)
	go func() { _, err := b.acquire(ctx, 80, patience, errFull); done <- err }()
	awaitCond(t, "the waiter", func() bool { b.mu.Lock(); defer b.mu.Unlock(); return len(b.waiting) == 1 })
	b.release(40)
	err := <-done
	elapsed := time.Since(start)
	if !errors.Is(err, errFull) {
		t.Fatalf("acquire: %v, want the budget's error", err)
	}
	if p := PredictedWait(err); p < 2*patience || p > 2*elapsed {
		t.Fatalf("predicted wait %v; want twice the wait, between %v and %v", p, 2*patience, 2*elapsed)
	}
}

func TestDrainTime(t *testing.T) {
	for _, c := range []struct {
		queued, freed int64
		elapsed, want time.Duration
	}{
		{80, 40, 10 * time.Second, 20 * time.Second},
		{10, 40, 10 * time.Second, 2500 * time.Millisecond},
		{10, 0, 10 * time.Second, 10 * time.Second}, // nothing freed: at least as long again
		{1000, 1, 10 * time.Second, MaxSlotRetry},   // capped
	} {
		if got := drainTime(c.queued, c.freed, c.elapsed); got != c.want {
			t.Errorf("drainTime(%d, %d, %v) = %v, want %v", c.queued, c.freed, c.elapsed, got, c.want)
		}
	}
}
