package api

import (
	"runtime"
	"runtime/metrics"
	"strings"
	"sync/atomic"
	"time"
)

// Coalesced writes on h2c connections.
//
// Go's HTTP/2 server flushes a connection's frames whenever its write
// queue is momentarily empty, each flush in a goroutine of its own, and
// the queue empties after nearly every reply: when a log batch completes,
// the partition wakes its requests' handlers one after the other, and each
// reply (HEADERS and DATA) reaches the connection alone, one write system
// call each. A write syscall on a socket is the largest single cost of a
// reply. So before a flush of an h2c connection reaches the socket it
// yields the processor once: the handlers already runnable (the rest of
// the batch) queue their replies meanwhile, and the server's next flush
// carries all of them. With nothing else runnable the yield returns at
// once, so a lone reply is not delayed.
//
// A yield waits behind every goroutine runnable at that moment (it goes
// to the back of the global run queue). That is a batch's handlers under
// normal load, but tens of thousands of new stream handlers while a flash
// crowd arrives, and then every flush would wait for all of them (5 ×
// 20,000 crowds on 2 cores: 12.6 % of reservations past their deadline,
// against none without yielding). So flushes yield only while the run
// queue is short: the runnable goroutines are sampled every
// runQueueSample (runtime/metrics, O(processors)), and past
// yieldRunnableMax the server writes as net/http alone does. The time a
// yield took is no signal: on a busy host the OS deschedules threads for
// milliseconds whatever the run queue holds.
const (
	// yieldRunnableMax: at some 10 µs per handler, a yield behind this
	// many waits at most a few milliseconds per processor, still well
	// under a request's latency at that load.
	yieldRunnableMax = 1024
	runQueueSample   = 10 * time.Millisecond
)

// yielder decides whether flushes yield (see above).
type yielder struct {
	runnable atomic.Int64 // the last sample
	gosched  func()       // runtime.Gosched; tests count it
}

func newYielder() *yielder { return &yielder{gosched: runtime.Gosched} }

// yield lets the runnable goroutines run first, unless there are many.
func (y *yielder) yield() {
	if y.runnable.Load() <= yieldRunnableMax {
		y.gosched()
	}
}

// sample keeps the runnable count current until stop is closed.
func (y *yielder) sample(stop <-chan struct{}) {
	s := []metrics.Sample{{Name: "/sched/goroutines/runnable:goroutines"}}
	t := time.NewTicker(runQueueSample)
	defer t.Stop()
	for {
		metrics.Read(s)
		if s[0].Value.Kind() == metrics.KindUint64 {
			y.runnable.Store(int64(s[0].Value.Uint64()))
		}
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}

// h2cPreface begins every h2c connection (prior knowledge); its first
// bytes tell it from an HTTP/1.1 request, whose method has no space.
const h2cPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// noteFirstBytes marks the connection h2c if its first bytes (at least 4)
// are the HTTP/2 preface's.
func (c *trackedConn) noteFirstBytes(p []byte) {
	if c.t.coalesce && len(p) >= 4 && strings.HasPrefix(h2cPreface, string(p[:min(len(p), len(h2cPreface))])) {
		c.h2.Store(true)
	}
}

// Write yields once before an h2c connection's flush reaches the socket.
func (c *trackedConn) Write(p []byte) (int, error) {
	if c.h2.Load() {
		c.t.yields.yield()
	}
	c.writes.Add(1)
	return c.Conn.Write(p)
}
