package engine

import (
	"context"
	"testing"
)

// The processor reads the clock once for the requests it takes together
// (admit's mono): a request queued after that read waited none, not a
// negative time that would pull the wait estimate and the delay metrics
// below zero; one queued before waited until the read.
func TestAdmitWaitFromOneClockRead(t *testing.T) {
	p := &partition{e: &Engine{}}
	var s waitSample
	for _, c := range []struct{ enq, mono, want int64 }{{100, 50, 0}, {0, 70, 70}, {70, 70, 0}} {
		r := &Request{ctx: context.Background(), enq: c.enq}
		before := s.waitNs
		if !p.admit(r, &s, c.mono) {
			t.Fatalf("request queued at %d refused at %d: %v", c.enq, c.mono, r.err)
		}
		if got := s.waitNs - before; got != c.want {
			t.Errorf("queued at %d, taken at %d: waited %d, want %d", c.enq, c.mono, got, c.want)
		}
	}
	if sum := p.delays.sumNs.Load(); sum != 70 || s.slots != 3 {
		t.Errorf("delays sum %d over %d slots, want 70 over 3", sum, s.slots)
	}
}
