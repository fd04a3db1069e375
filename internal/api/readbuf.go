package api

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
)

// Coalesced reads.
//
// Go's HTTP/2 server reads each frame from the connection in two reads, its
// 9-byte header and then its payload, straight from the socket: an h2c
// request (HEADERS and DATA) costs four read system calls, a third of the
// server's syscall time under load. Its HTTP/1.1 server buffers, but after
// each request it waits for the next with a 1-byte read, so the next
// request costs two reads. A small read on a tracked connection is
// therefore served from a buffer filled by one read of everything the
// socket holds, and a large one (net/http's own buffered reader) goes to
// the socket as before.
//
// The buffer is taken from a pool only while the socket has bytes for it
// and given back as soon as they are consumed: a connection waiting for
// its next request holds none, so 100,000 idle connections cost nothing
// more than before.
const (
	// coalesceBufSize is one socket read's worth: several h2c requests'
	// frames, or an HTTP/1.1 request with its body.
	coalesceBufSize = 8 << 10
	// directReadSize: a read asking for at least this much goes to the
	// socket directly, as a buffered reader's fill would gain nothing
	// from a second buffer (net/http's HTTP/1.1 reader asks for 4 KiB).
	directReadSize = 4 << 10
)

var coalescePool = sync.Pool{New: func() any { b := make([]byte, coalesceBufSize); return &b }}

// readBuf serves a connection's small reads from one socket read.
type readBuf struct {
	raw syscall.RawConn
	mu  sync.Mutex // readers are serialised anyway (net/http, crypto/tls); this makes it a rule
	buf *[]byte    // nil unless it holds unread bytes or a read is filling it
	r   int
	w   int
	// held is w-r, readable without mu by the connection tracker, which
	// must not take a connection with a request in the buffer for idle.
	held atomic.Int64
	// The last fill's outcome, set by fillFn.
	n    int
	err  error
	fill func(fd uintptr) bool
	// reads counts socket reads on the connection (Server's metric).
	reads *atomic.Uint64
}

func newReadBuf(nc net.Conn, reads *atomic.Uint64) *readBuf {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	b := &readBuf{raw: raw, reads: reads}
	b.fill = b.fillFn
	return b
}

// read serves p from the buffer, or the socket. nc is the socket, for
// reads that go to it directly and for the errors' addresses.
func (b *readBuf) read(nc net.Conn, p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.r < b.w {
		return b.take(p), nil
	}
	b.reads.Add(1)
	if len(p) >= directReadSize || len(p) == 0 {
		return nc.Read(p)
	}
	b.n, b.err = 0, nil
	if err := b.raw.Read(b.fill); err != nil {
		// A deadline or a close, as net.Conn.Read reports them.
		var oe *net.OpError
		if errors.As(err, &oe) {
			oe.Op = "read"
		}
		return 0, err
	}
	switch {
	case b.err != nil:
		b.release()
		return 0, &net.OpError{Op: "read", Net: nc.LocalAddr().Network(), Source: nc.LocalAddr(), Addr: nc.RemoteAddr(), Err: os.NewSyscallError("read", b.err)}
	case b.n == 0:
		b.release()
		return 0, io.EOF
	}
	b.r, b.w = 0, b.n
	return b.take(p), nil
}

// fillFn is the raw read: it takes a buffer only once the socket has
// bytes, so waiting for the next request holds none. It returns false to
// wait for the socket to become readable.
func (b *readBuf) fillFn(fd uintptr) bool {
	if b.buf == nil {
		b.buf = coalescePool.Get().(*[]byte)
	}
	for {
		n, err := syscall.Read(int(fd), *b.buf)
		switch err {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			b.release()
			return false
		}
		b.n, b.err = max(n, 0), err
		return true
	}
}

func (b *readBuf) take(p []byte) int {
	n := copy(p, (*b.buf)[b.r:b.w])
	b.r += n
	if b.r == b.w {
		b.release()
	} else {
		b.held.Store(int64(b.w - b.r))
	}
	return n
}

func (b *readBuf) release() {
	if b.buf != nil {
		if len(*b.buf) == coalesceBufSize { // not one of putBack's
			coalescePool.Put(b.buf)
		}
		b.buf = nil
	}
	b.r, b.w = 0, 0
	b.held.Store(0)
}

// buffered reports whether bytes the client sent wait in the buffer.
func (b *readBuf) buffered() bool { return b != nil && b.held.Load() > 0 }
