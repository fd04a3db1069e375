package server

import (
	"context"
	"math"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// A fixed soft memory limit is a trap: once what the process really needs
// (live heap, goroutine stacks of a connection storm, runtime metadata)
// comes near it, the collector runs back to back, and a server that
// needed 12 s of CPU for a load was seen needing 50 s. So the configured
// limit is a floor: every governorPeriod the limit in force becomes the
// larger of it and what the process needs plus headroom for the heap to
// grow by half the live heap, at least governorHeadroom, so the collector
// never works harder than at GOGC=50 (and never with less than 64 MiB to
// fill between two cycles), while GOGC=400 still decides whenever the
// state is small. Doubling the live heap instead took the full compat
// spike to 311 MiB resident, past its 300 MB goal.

const (
	governorPeriod   = 250 * time.Millisecond
	governorHeadroom = 64 << 20
)

var governorSamples = []metrics.Sample{
	{Name: "/memory/classes/total:bytes"},
	{Name: "/memory/classes/heap/released:bytes"},
	{Name: "/memory/classes/heap/free:bytes"},
	{Name: "/memory/classes/heap/objects:bytes"},
	{Name: "/memory/classes/heap/unused:bytes"},
	{Name: "/gc/heap/live:bytes"},
}

// governedLimit is the limit for a process whose runtime holds total bytes
// (what the soft limit counts), of which heap objects and their free and
// unused space are heap, and live bytes survived the last collection.
func governedLimit(floor, total, heap, live int64) int64 {
	nonHeap := max(total-heap, 0)
	return max(floor, nonHeap+live+max(live/2, governorHeadroom))
}

// governMemory adjusts the soft limit until ctx ends. floor is the
// configured limit; callers skip it when there is none or GOMEMLIMIT rules.
func governMemory(ctx context.Context, floor int64) {
	t := time.NewTicker(governorPeriod)
	defer t.Stop()
	s := make([]metrics.Sample, len(governorSamples))
	copy(s, governorSamples)
	current := floor
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		metrics.Read(s)
		v := func(i int) int64 { return int64(s[i].Value.Uint64()) }
		total := v(0) - v(1)
		heap := v(2) + v(3) + v(4)
		want := governedLimit(floor, total, heap, v(5))
		// Moves of under 1/16 are noise; not worth a runtime call.
		if d := want - current; d > current/16 || -d > current/16 || (want == floor && current != floor) {
			debug.SetMemoryLimit(want)
			current = want
		}
	}
}

// DefaultMemoryLimit keeps the heap of a server with about 100 MB of live
// state well under 300 MB resident, while GOGC=400 still spaces collections
// out for smaller states (the limit only bites when heap growth would pass
// it). It is a floor, not a ceiling: when the process needs more (see
// memgov.go), the limit follows, so the collector never thrashes.
const DefaultMemoryLimit = 256 << 20

// memoryLimit applies the soft memory limit unless GOMEMLIMIT is set, and
// returns the one in force (math.MaxInt64: none).
func memoryLimit(cfg Config) int64 {
	if _, set := os.LookupEnv("GOMEMLIMIT"); set {
		return debug.SetMemoryLimit(-1)
	}
	limit := cfg.MemoryLimit
	switch {
	case limit == 0:
		limit = DefaultMemoryLimit
	case limit < 0:
		limit = math.MaxInt64
	}
	debug.SetMemoryLimit(limit)
	return limit
}

// startGovernor applies the soft memory limit and, unless GOMEMLIMIT fixes
// it or there is none, starts the governor, which New's undo stops; it
// returns the limit in force.
func (s *Server) startGovernor() int64 {
	limit := memoryLimit(s.cfg)
	if _, set := os.LookupEnv("GOMEMLIMIT"); !set && limit != math.MaxInt64 {
		ctx, stop := context.WithCancel(context.Background())
		s.undo = append(s.undo, stop)
		go governMemory(ctx, limit)
	}
	return limit
}
