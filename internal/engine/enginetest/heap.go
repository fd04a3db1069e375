package enginetest

import (
	"math"
	"runtime"
)

// RetainedHeap reports the live heap that what build returns keeps: the
// least over three builds. HeapAlloc is process-wide, and other tests'
// goroutines may still be winding down (in the forward pass, whole
// cluster nodes); what they allocate during a build only ever adds to the
// figure, so the least of a few is the build's own cost.
func RetainedHeap(build func() any) int64 {
	least := int64(math.MaxInt64)
	for range 3 {
		var ms runtime.MemStats
		collect(&ms)
		before := int64(ms.HeapAlloc)
		v := build()
		collect(&ms)
		runtime.KeepAlive(v)
		least = min(least, int64(ms.HeapAlloc)-before)
	}
	return least
}

// collect runs the collector twice, the first moving what sync.Pools hold
// to their victim caches and the second freeing it, and reads the stats.
func collect(ms *runtime.MemStats) {
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(ms)
}
