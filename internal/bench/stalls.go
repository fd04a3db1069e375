package bench

import (
	"context"
	"math"
	"sync/atomic"
	"time"
)

// On a shared host the generator's and the server's threads can wait
// tens to hundreds of ms for a CPU, and the server's group commit as long
// for the disk's flush: every submit and report waits for that fsync, and
// the run's tail is the host's, not the server's (docs/BENCHMARKS.md, "Jobs
// end to end over the plain jq protocol"). The e2e phase measures both
// beside its latencies, so a report says whose its tail is.
const (
	// stallTick is how often the stall meter asks to wake: sleeping 1 ms
	// at a time cost an idle process 4 % of a core, 5 ms a fifth of that.
	stallTick = 5 * time.Millisecond
	// stallThreshold: a wake-up later than this is a stall of the host.
	stallThreshold = 20 * time.Millisecond
	// fsyncSlowSeconds and fsyncStallSeconds are bucket bounds of the
	// server's surge_wal_fsync_seconds: fsyncs above the first are slow,
	// above the second a stall of every caller of the log.
	fsyncSlowSeconds  = 0.0256
	fsyncStallSeconds = 0.1024
)

// walFsyncMetric is the server's fsync histogram (internal/server metrics).
const walFsyncMetric = "surge_wal_fsync_seconds"

// StallReport is what the stall meter saw: a goroutine of the bench that
// sleeps stallTick at a time and counts the wake-ups that came more than
// stallThreshold late (the process had no CPU, or the runtime stopped it).
type StallReport struct {
	Count   int64 `json:"count"`
	MaxUs   int64 `json:"maxUs"`
	TotalUs int64 `json:"totalUs"` // lateness summed over the counted stalls
}

// stallMeter runs until stopped; now and wait are the clock and the sleep
// (the real ones but in tests).
type stallMeter struct {
	now  func() time.Duration
	wait func(time.Duration)
	stop context.CancelFunc
	done chan StallReport
	// since is the stall time counted since the last take.
	since atomic.Int64
}

// take is the stall time (µs) counted since its last call: a timeline's
// point (Timeline.host).
func (m *stallMeter) take() int64 { return m.since.Swap(0) }

func newStallMeter() *stallMeter {
	base := time.Now()
	return &stallMeter{now: func() time.Duration { return time.Since(base) }, wait: time.Sleep}
}

// start begins measuring on a goroutine of its own.
func (m *stallMeter) start() {
	ctx, stop := context.WithCancel(context.Background())
	m.stop, m.done = stop, make(chan StallReport, 1)
	go func() { m.done <- m.run(ctx) }()
}

// end stops the meter and returns what it saw.
func (m *stallMeter) end() StallReport {
	m.stop()
	return <-m.done
}

func (m *stallMeter) run(ctx context.Context) StallReport {
	var r StallReport
	prev := m.now()
	for ctx.Err() == nil {
		m.wait(stallTick)
		now := m.now()
		if late := now - prev - stallTick; late > stallThreshold {
			r.Count++
			r.TotalUs += late.Microseconds()
			m.since.Add(late.Microseconds())
			r.MaxUs = max(r.MaxUs, late.Microseconds())
		}
		prev = now
	}
	return r
}

// FsyncReport is the server's WAL fsyncs during a run, from its
// surge_wal_fsync_seconds histogram read before and after.
type FsyncReport struct {
	Count   int64   `json:"count"`
	Slow    int64   `json:"over25ms"`  // longer than fsyncSlowSeconds
	Stalled int64   `json:"over102ms"` // longer than fsyncStallSeconds
	Seconds float64 `json:"seconds"`   // all of them together
}

// fsyncMeter reads a server's fsync histogram around a run; a server
// without one (the do-nothing server) gives no report.
type fsyncMeter struct {
	base   string
	before metrics
}

func meterFsyncs(ctx context.Context, base string) *fsyncMeter {
	m := &fsyncMeter{base: base}
	if base != "" {
		m.before, _ = scrape(ctx, base)
	}
	return m
}

// end is the fsyncs since meterFsyncs, or nil if either read failed or
// the server keeps no such histogram.
func (m *fsyncMeter) end(ctx context.Context) *FsyncReport {
	if m.before == nil {
		return nil
	}
	after, err := scrape(ctx, m.base)
	if err != nil {
		return nil
	}
	return fsyncsBetween(m.before, after)
}

func fsyncsBetween(before, after metrics) *FsyncReport {
	was, now := before.buckets(walFsyncMetric), after.buckets(walFsyncMetric)
	if now == nil {
		return nil
	}
	total := now[math.Inf(1)] - was[math.Inf(1)]
	over := func(bound float64) int64 {
		return int64(total - (now[bound] - was[bound]))
	}
	sum, _ := after.value(walFsyncMetric + "_sum")
	sumWas, _ := before.value(walFsyncMetric + "_sum")
	return &FsyncReport{Count: int64(total), Slow: over(fsyncSlowSeconds), Stalled: over(fsyncStallSeconds), Seconds: sum - sumWas}
}

// hostMeters are a run's stall meter and fsync reads, started together.
type hostMeters struct {
	stalls *stallMeter
	fsyncs *fsyncMeter
}

func startHostMeters(ctx context.Context, base string) *hostMeters {
	h := &hostMeters{stalls: newStallMeter(), fsyncs: meterFsyncs(ctx, base)}
	h.stalls.start()
	return h
}

// end stops the meters and puts what they saw in rep.
func (h *hostMeters) end(ctx context.Context, rep *JobsRunReport) {
	s := h.stalls.end()
	rep.HostStalls = &s
	rep.ServerFsyncs = h.fsyncs.end(ctx)
}
