package bench

import (
	"fmt"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// A run's time series: one point per --sample-interval (default
// timelineInterval, at least minSampleInterval), for the charts.
// Memory is bounded whatever the run's length: one live histogram, and at
// most maxTimelinePoints points; past that, neighbouring points merge and
// the interval doubles (a long run gets a coarser chart, never a bigger
// process).
const (
	timelineInterval  = time.Second
	minSampleInterval = 10 * time.Millisecond
	maxTimelinePoints = 3600
	// timelineSigFigs is the live histogram's precision: two significant
	// digits are a chart's resolution and keep the histogram small.
	timelineSigFigs = 2
)

// TimelinePoint is one interval of a run: what completed in it, its
// latency percentiles, and the server's CPU spent in it.
type TimelinePoint struct {
	// Seconds is the interval's end, from the run's start.
	Seconds float64 `json:"seconds"`
	// Interval is the point's length in seconds (the last one may be
	// shorter; merged points are longer).
	Interval float64 `json:"intervalSeconds"`
	Ops      int64   `json:"ops"`
	P50Us    int64   `json:"p50Us"`
	P90Us    int64   `json:"p90Us"`
	P99Us    int64   `json:"p99Us"`
	MaxUs    int64   `json:"maxUs"`
	// ServerCPUSeconds is nil when the server's CPU could not be read.
	ServerCPUSeconds *float64 `json:"serverCpuSeconds,omitempty"`
	// HostStallUs is how long the host kept the bench from running in
	// the point (stalls.go); nil for benches that do not measure it.
	HostStallUs *int64 `json:"hostStallUs,omitempty"`
}

// PerSecond is the point's throughput.
func (p TimelinePoint) PerSecond() float64 {
	if p.Interval <= 0 {
		return 0
	}
	return float64(p.Ops) / p.Interval
}

// CPUPerOpUs is the server's CPU microseconds per completed operation in
// the point; false when unknown or nothing completed.
func (p TimelinePoint) CPUPerOpUs() (float64, bool) {
	if p.ServerCPUSeconds == nil || p.Ops == 0 {
		return 0, false
	}
	return *p.ServerCPUSeconds * 1e6 / float64(p.Ops), true
}

// Timeline samples a run while it runs: record is called once per
// completed operation (from many goroutines), and a sampler closes a
// point every interval.
type Timeline struct {
	cpu func() (float64, error) // the server's CPU seconds; nil for none
	// host is the bench's stall time since its last call (stallMeter.take);
	// nil for none.
	host     func() int64
	interval time.Duration

	mu      sync.Mutex
	h       *hdrhistogram.Histogram
	ops     int64
	start   time.Time
	last    time.Time
	lastCPU *float64
	points  []TimelinePoint

	quit, stopped chan struct{}
}

// newTimeline closes a point every interval (0: timelineInterval) and
// samples the server's CPU with cpu (nil: not measured).
func newTimeline(interval time.Duration, cpu func() (float64, error)) *Timeline {
	if interval <= 0 {
		interval = timelineInterval
	}
	return &Timeline{cpu: cpu, interval: interval, h: hdrhistogram.New(1, maxLatencyUs, timelineSigFigs)}
}

// checkSampleInterval refuses a --sample-interval too short to sample.
func checkSampleInterval(d time.Duration) error {
	if d != 0 && d < minSampleInterval {
		return fmt.Errorf("--sample-interval %v: want at least %v", d, minSampleInterval)
	}
	return nil
}

// record counts one completed operation that took us microseconds.
func (t *Timeline) record(us int64) {
	if t == nil {
		return
	}
	t.mu.Lock()
	_ = t.h.RecordValue(min(max(us, 1), maxLatencyUs))
	t.ops++
	t.mu.Unlock()
}

// latency records one request's latency without counting an operation:
// for a bench whose operation is several requests (a commerce iteration),
// counted apart by done.
func (t *Timeline) latency(us int64) {
	if t == nil {
		return
	}
	t.mu.Lock()
	_ = t.h.RecordValue(min(max(us, 1), maxLatencyUs))
	t.mu.Unlock()
}

// done counts one completed operation whose latencies were recorded.
func (t *Timeline) done() {
	if t == nil {
		return
	}
	t.mu.Lock()
	t.ops++
	t.mu.Unlock()
}

// begin starts the clock and the sampler.
func (t *Timeline) begin() {
	if t == nil {
		return
	}
	t.start = time.Now()
	t.last = t.start
	t.lastCPU = t.readCPU()
	t.quit, t.stopped = make(chan struct{}), make(chan struct{})
	go t.sample()
}

func (t *Timeline) sample() {
	defer close(t.stopped)
	tick := time.NewTicker(t.interval)
	defer tick.Stop()
	for {
		select {
		case <-t.quit:
			return
		case <-tick.C:
			t.close(time.Now())
		}
	}
}

// end stops the sampler and closes the last, partial point, and returns
// the points.
func (t *Timeline) end() []TimelinePoint {
	if t == nil {
		return nil
	}
	close(t.quit)
	<-t.stopped
	t.close(time.Now())
	// A last sliver of an interval would chart as noise: it joins the
	// point before it.
	if n := len(t.points); n >= 2 && t.points[n-1].Interval < t.interval.Seconds()/2 {
		t.points = append(t.points[:n-2], mergePoints(t.points[n-2], t.points[n-1]))
	}
	return t.points
}

func (t *Timeline) readCPU() *float64 {
	if t.cpu == nil {
		return nil
	}
	v, err := t.cpu()
	if err != nil {
		return nil
	}
	return &v
}

// close ends the point that runs to now.
func (t *Timeline) close(now time.Time) {
	cpu := t.readCPU()
	t.mu.Lock()
	p := TimelinePoint{
		Seconds: now.Sub(t.start).Seconds(), Interval: now.Sub(t.last).Seconds(), Ops: t.ops,
		P50Us: t.h.ValueAtQuantile(50), P90Us: t.h.ValueAtQuantile(90), P99Us: t.h.ValueAtQuantile(99), MaxUs: t.h.Max(),
	}
	t.h.Reset()
	t.ops = 0
	t.mu.Unlock()
	if cpu != nil && t.lastCPU != nil {
		d := *cpu - *t.lastCPU
		p.ServerCPUSeconds = &d
	}
	if t.host != nil {
		us := t.host()
		p.HostStallUs = &us
	}
	t.last, t.lastCPU = now, cpu
	t.points = appendBounded(t.points, p, maxTimelinePoints)
}

// appendBounded appends p, first merging neighbours in pairs when points
// already holds limit (limit must be even).
func appendBounded(points []TimelinePoint, p TimelinePoint, limit int) []TimelinePoint {
	if len(points) >= limit {
		half := points[:0]
		for i := 0; i+1 < len(points); i += 2 {
			half = append(half, mergePoints(points[i], points[i+1]))
		}
		points = half
	}
	return append(points, p)
}

// mergePoints joins two neighbouring points. Percentiles of the pair are
// not known from theirs; the larger of each is kept, an upper bound (a
// chart of a long run errs towards slow, not fast).
func mergePoints(a, b TimelinePoint) TimelinePoint {
	m := TimelinePoint{
		Seconds: b.Seconds, Interval: a.Interval + b.Interval, Ops: a.Ops + b.Ops,
		P50Us: max(a.P50Us, b.P50Us), P90Us: max(a.P90Us, b.P90Us), P99Us: max(a.P99Us, b.P99Us), MaxUs: max(a.MaxUs, b.MaxUs),
	}
	if a.ServerCPUSeconds != nil && b.ServerCPUSeconds != nil {
		s := *a.ServerCPUSeconds + *b.ServerCPUSeconds
		m.ServerCPUSeconds = &s
	}
	if a.HostStallUs != nil && b.HostStallUs != nil {
		us := *a.HostStallUs + *b.HostStallUs
		m.HostStallUs = &us
	}
	return m
}

// sumCPU reads the CPU of several processes (a cluster's nodes) as one;
// nil for none.
func sumCPU(reads []func() (float64, error)) func() (float64, error) {
	if len(reads) == 0 {
		return nil
	}
	return func() (float64, error) {
		total := 0.0
		for _, read := range reads {
			v, err := read()
			if err != nil {
				return 0, err
			}
			total += v
		}
		return total, nil
	}
}
