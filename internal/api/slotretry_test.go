package api

import (
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
