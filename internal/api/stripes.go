package api

import (
	"runtime"
	"sync/atomic"
)

// Counters that requests on every core write are kept in stripes: a
// connection, and every request it carries, adds to the stripe it was
// given when accepted, and a scrape sums the stripes. One counter for the
// whole server is a cache line that every core writes on every request;
// on many cores each such write first waits for the line to come over
// from the core that wrote it last (issue 24's many-core goal,
// docs/BENCHMARKS.md "Many cores"). A connection's goroutine mostly
// stays on one core, so its stripe mostly does too.

// maxStripes bounds the stripes of one counter: beyond it, connections
// share stripes (each a 64-byte line), which costs a little contention
// and saves memory on machines with very many cores.
const maxStripes = 16

func stripeCount() int { return min(max(runtime.GOMAXPROCS(0), 1), maxStripes) }

// paddedCounter is a counter alone on its cache line.
type paddedCounter struct {
	atomic.Uint64
	_ [56]byte
}

// stripedCounter is a counter in stripes.
type stripedCounter []paddedCounter

func newStripedCounter() stripedCounter { return make(stripedCounter, stripeCount()) }

// at is the counter of stripe i (any i: it wraps).
func (s stripedCounter) at(i uint32) *atomic.Uint64 { return &s[i%uint32(len(s))].Uint64 }

// Load is the counter's value: the sum of its stripes.
func (s stripedCounter) Load() uint64 {
	var n uint64
	for i := range s {
		n += s[i].Load()
	}
	return n
}
