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
	b, _ := Retained(build)
	return b
}

// Retained is RetainedHeap with the number of heap objects kept too (the
// least of each over the builds): what the collector has to mark.
func Retained(build func() any) (bytes, objects int64) {
	bytes, objects = math.MaxInt64, math.MaxInt64
	for range 3 {
		var ms runtime.MemStats
		collect(&ms)
		b0, o0 := int64(ms.HeapAlloc), int64(ms.HeapObjects)
		v := build()
		collect(&ms)
		runtime.KeepAlive(v)
		bytes = min(bytes, int64(ms.HeapAlloc)-b0)
		objects = min(objects, int64(ms.HeapObjects)-o0)
	}
	return bytes, objects
}

// collect runs the collector twice, the first moving what sync.Pools hold
// to their victim caches and the second freeing it, and reads the stats.
func collect(ms *runtime.MemStats) {
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(ms)
}
