package api

import (
	"runtime"
	"strings"
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
		runtime.Gosched()
	}
	c.t.socketWrites.Add(1)
	return c.Conn.Write(p)
}
