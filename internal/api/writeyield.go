package api

import (
	"runtime"
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
// crowd arrives, and then each flush would wait for all of them. So a
// yield that took longer than maxYield switches yielding off for
// yieldPause, server-wide: the run queue is long, and the server writes
// as net/http alone does until it is short again.
const (
	// maxYield is far above what a batch's replies take to queue (tens
	// of handlers of some 10 µs each) and far below a request's latency.
	maxYield   = time.Millisecond
	yieldPause = time.Second
)

// yielder decides whether flushes yield (see above).
type yielder struct {
	epoch time.Time
	now   func() int64 // ns since epoch; tests move it
	// offUntil is when yielding resumes (ns since epoch).
	offUntil atomic.Int64
}

func newYielder() *yielder {
	y := &yielder{epoch: time.Now()}
	y.now = func() int64 { return int64(time.Since(y.epoch)) }
	return y
}

// yield lets the runnable goroutines run first, unless a recent yield
// found the run queue long.
func (y *yielder) yield() {
	start := y.now()
	if start < y.offUntil.Load() {
		return
	}
	runtime.Gosched()
	if end := y.now(); end-start > int64(maxYield) {
		y.offUntil.Store(end + int64(yieldPause))
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
	c.t.socketWrites.Add(1)
	return c.Conn.Write(p)
}
