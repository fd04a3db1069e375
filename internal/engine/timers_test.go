package engine

import (
	"fmt"
	"slices"
	"testing"
)

// Cancelled timers' heap entries do not pile up under one far ahead: the
// heap stays within twice the live timers (plus the slack), and a
// rebuild neither loses a live timer nor brings back one that popDue
// has taken out (its record on its way): each fires once, in time order.
func TestTimerHeapStaysBounded(t *testing.T) {
	tt := newTimerTable()
	tt.set(1, "far", 1e18, nil)
	for i := range 10_000 {
		tt.set(1, fmt.Sprint("t", i), int64(1000+i), nil)
	}
	// Two are due and taken out, their records on their way.
	out := tt.popDue(1001, nil, 10, 1<<20)
	if len(out) != 2 {
		t.Fatalf("popDue: %v", out)
	}
	// Every other one is cancelled but the last ten (a finished job's TTL).
	for i := 2; i < 9_990; i++ {
		tt.cancel(1, fmt.Sprint("t", i))
		if len(tt.due) > 2*len(tt.byKey)+compactSlack {
			t.Fatalf("after %d cancels the heap holds %d entries for %d timers", i-1, len(tt.due), len(tt.byKey))
		}
	}
	if len(tt.due) > 2*len(tt.byKey)+compactSlack {
		t.Fatalf("the heap holds %d entries for %d timers", len(tt.due), len(tt.byKey))
	}
	var fired []string
	for _, k := range tt.popDue(1e18, nil, 100, 1<<20) {
		fired = append(fired, k.id)
	}
	want := []string{"t9990", "t9991", "t9992", "t9993", "t9994", "t9995", "t9996", "t9997", "t9998", "t9999", "far"}
	if !slices.Equal(fired, want) {
		t.Fatalf("fired %v, want %v (t0 and t1 were taken out before)", fired, want)
	}
}
