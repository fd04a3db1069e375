package api

import (
	"bytes"
	"runtime"
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

// h2Preface begins every h2c connection (prior knowledge).
var h2Preface = []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")

// noteFirstBytes marks the connection h2c if its first bytes are the
// HTTP/2 preface.
func (c *trackedConn) noteFirstBytes(p []byte) {
	if c.t.coalesce && bytes.HasPrefix(p, h2Preface[:min(len(p), len(h2Preface))]) && len(p) >= 4 {
		c.h2.Store(true)
	}
}

// Write yields once before an h2c connection's flush reaches the socket.
func (c *trackedConn) Write(p []byte) (int, error) {
	if c.h2.Load() {
		runtime.Gosched()
	}
	return c.Conn.Write(p)
}
