package bench

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A wake-up of the stall meter that comes late beyond the threshold is a
// host stall, counted with its lateness; on-time and slightly late ones
// are not. The clock is the test's, so the host's own stalls cannot blur it.
func TestStallMeterCountsLateWakeUps(t *testing.T) {
	// Each sleep advances the clock by its tick plus this lateness.
	late := []time.Duration{0, 5 * time.Millisecond, 0, 150 * time.Millisecond, stallThreshold, 0, 30 * time.Millisecond}
	var clock time.Duration
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	i := 0
	m := &stallMeter{
		now: func() time.Duration { return clock },
		wait: func(d time.Duration) {
			clock += d + late[i]
			if i++; i == len(late) {
				cancel()
			}
		},
	}
	got := m.run(ctx)
	want := StallReport{Count: 2, MaxUs: 150_000, TotalUs: 180_000}
	if got != want {
		t.Fatalf("stalls: got %+v, want %+v (only the 150 ms and 30 ms wake-ups are over %v)", got, want, stallThreshold)
	}
	if us := m.take(); us != 180_000 {
		t.Fatalf("stall time since the start: %d µs, want 180000", us)
	}
	if us := m.take(); us != 0 {
		t.Fatalf("stall time since the last take: %d µs, want 0", us)
	}
}

// A timeline given the meter puts each point's stall time in it, and
// merged points keep the sum: a stalled interval shows as the host's.
func TestTimelinePointsCarryHostStalls(t *testing.T) {
	stalls := []int64{0, 120_000, 0, 30_000}
	var calls atomic.Int64
	tl := newTimeline(minSampleInterval, nil)
	tl.host = func() int64 { return stalls[(calls.Add(1)-1)%int64(len(stalls))] }
	tl.begin()
	for calls.Load() < 6 {
		time.Sleep(minSampleInterval)
	}
	pts := tl.end()
	var sum, want int64
	for _, p := range pts {
		if p.HostStallUs == nil {
			t.Fatalf("point %+v has no host stall time", p)
		}
		sum += *p.HostStallUs
	}
	for k := range calls.Load() {
		want += stalls[k%int64(len(stalls))]
	}
	if sum != want {
		t.Fatalf("host stall time over the points: %d µs, want %d", sum, want)
	}
	a, b := int64(5), int64(7)
	if m := mergePoints(TimelinePoint{HostStallUs: &a}, TimelinePoint{HostStallUs: &b}); m.HostStallUs == nil || *m.HostStallUs != 12 {
		t.Fatalf("merged: %+v", m)
	}
}

// The meter started and ended around a run stops its goroutine and
// reports; a quiet stretch has no stall of more than the threshold
// unless the host stalled the test too, so only the shape is checked.
func TestStallMeterStartEnd(t *testing.T) {
	m := newStallMeter()
	m.start()
	time.Sleep(5 * stallTick)
	r := m.end()
	if r.Count < 0 || r.TotalUs < r.MaxUs {
		t.Fatalf("stalls: %+v", r)
	}
}

const fsyncsBefore = `# TYPE surge_wal_fsync_seconds histogram
surge_wal_fsync_seconds_bucket{le="0.0064"} 90
surge_wal_fsync_seconds_bucket{le="0.0256"} 99
surge_wal_fsync_seconds_bucket{le="0.1024"} 100
surge_wal_fsync_seconds_bucket{le="+Inf"} 100
surge_wal_fsync_seconds_sum 0.5
surge_wal_fsync_seconds_count 100
`

const fsyncsAfter = `# TYPE surge_wal_fsync_seconds histogram
surge_wal_fsync_seconds_bucket{le="0.0064"} 1080
surge_wal_fsync_seconds_bucket{le="0.0256"} 1092
surge_wal_fsync_seconds_bucket{le="0.1024"} 1096
surge_wal_fsync_seconds_bucket{le="+Inf"} 1098
surge_wal_fsync_seconds_sum 3.25
surge_wal_fsync_seconds_count 1098
`

// The fsyncs of a run are the histogram's growth between two reads: how
// many, how many over 25.6 ms and over 102.4 ms, and their time in all.
func TestFsyncsBetweenReads(t *testing.T) {
	before, err := parseMetrics(strings.NewReader(fsyncsBefore))
	if err != nil {
		t.Fatal(err)
	}
	after, err := parseMetrics(strings.NewReader(fsyncsAfter))
	if err != nil {
		t.Fatal(err)
	}
	got := fsyncsBetween(before, after)
	want := FsyncReport{Count: 998, Slow: 5, Stalled: 2, Seconds: 2.75}
	if got == nil || *got != want {
		t.Fatalf("fsyncs: got %+v, want %+v", got, want)
	}
	none, _ := parseMetrics(strings.NewReader("# TYPE other counter\nother 1\n"))
	if r := fsyncsBetween(none, none); r != nil {
		t.Fatalf("a server without the histogram: got %+v, want no report", r)
	}
}
