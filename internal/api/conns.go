package api

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Connection limits.
//
// Every client connection is a file descriptor. Past the open-file limit
// accept fails (EMFILE), the connection waits in the kernel's backlog and
// the client hangs, while the log and snapshots cannot open files either.
// So connections are capped below that limit. At the cap a new connection
// takes the place of the connection that has been idle longest (a kept-alive
// connection between requests, or one that has sent nothing for
// newConnGrace); only if every connection is busy is the new one refused,
// with a short HTTP/1.1 503, so the client hears why at once.

const (
	// MinReservedFiles is the least number of descriptors kept out of the
	// connection budget for the log, snapshots, the data dir lock, the
	// listener, stdio, the poller and refusals being written; 10 % of the
	// file limit is kept if that is more.
	MinReservedFiles = 64
	// maxRefusing bounds refused connections held open while their 503 is
	// written and the client's request drained; they come out of the
	// reserve. Past it a refusal is written and closed at once.
	maxRefusing = 16
	// newConnGrace is how long a connection may stay silent after accept
	// before it counts as idle: a client that connects and sends nothing
	// holds a descriptor like an idle one does.
	newConnGrace = 5 * time.Second
	// shutdownSilentGrace is how long a connection may stay silent after
	// accept once a graceful shutdown has begun: a client sends its request
	// as soon as it has connected, so one silent this long never will.
	shutdownSilentGrace = 500 * time.Millisecond
	// refuseLinger bounds how long a refused connection is kept to drain the
	// client's request, so closing it does not reset the connection before
	// the client has read the 503.
	refuseLinger = 2 * time.Second
)

// ConnLimit returns the connection cap for an open-file limit of nofile:
// requested if it fits, nofile minus the reserve (max(MinReservedFiles,
// nofile/10)) if requested is 0, or an error naming both numbers if
// requested does not fit.
func ConnLimit(nofile uint64, requested int) (int, error) {
	n := int64(min(nofile, math.MaxInt32))
	reserve := max(MinReservedFiles, n/10)
	allowed := n - reserve
	if allowed < 1 {
		return 0, fmt.Errorf("the open-file limit (ulimit -n) is %d, and %d descriptors are kept for the log, snapshots and the listener, so no client could connect; raise the limit", n, reserve)
	}
	if requested == 0 {
		return int(allowed), nil
	}
	if int64(requested) > allowed {
		return 0, fmt.Errorf("--max-conns %d is above what the open-file limit allows: the limit (ulimit -n) is %d and %d descriptors are kept for the log, snapshots and the listener, so at most %d; lower --max-conns, use 0 to derive it, or raise the limit",
			requested, n, reserve, allowed)
	}
	return requested, nil
}

func fileLimit() (uint64, error) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, fmt.Errorf("reading the open-file limit: %w", err)
	}
	return rl.Cur, nil
}

// connTracker counts open connections and keeps the sheddable ones in two
// kinds of list, oldest first: idle ones (between requests) and new ones
// (nothing read yet). The lists are in shards, each with its own lock,
// a connection in its stripe's (stripes.go): an HTTP/1.1 connection
// goes idle and active again with every request, and one lock for all
// of them was two thirds of the server's lock contention at GOMAXPROCS 8
// (docs/BENCHMARKS.md, "The connection tracker's lock"). Shedding, which
// is rare (at the cap only), looks at every shard's heads for the oldest.
// There are at most maxStripes shards (oldestLocked's array).
type connTracker struct {
	max int

	// mu guards open and grace, and is taken before any shard's lock by
	// whatever takes more than one shard's (shedding, closeSilent).
	mu    sync.Mutex
	open  int
	grace time.Duration // newConnGrace; tests shorten it
	// The server's idle and header timeouts: a new connection waits for
	// its first request as long as a kept-alive one waits for its next,
	// and its header timeout runs from the request's first byte.
	idleTimeout, headerTimeout time.Duration

	shards []connShard
	// releases counts connections closed or gone idle (each frees a slot
	// a newcomer may take), in stripes; admit and refusal fold them into
	// retry (folded so far, guarded by mu), which would otherwise be one
	// more lock per request.
	releases stripedCounter
	folded   uint64

	refusing atomic.Int64
	// coalesce serves small reads from one socket read (readbuf.go) and
	// has h2c flushes yield first (writeyield.go); false reads and writes
	// as net/http alone does (Limits.StandardConns).
	coalesce bool
	// yields has h2c flushes yield first (writeyield.go).
	yields *yielder
	// Reads from and writes to client sockets, for the metrics; each
	// connection adds to its stripe (stripes.go).
	socketReads, socketWrites stripedCounter
	nextStripe                atomic.Uint32
	// tlsConfig is the listener's TLS configuration (Server.ServeTLS);
	// nil in clear. Connections are tracked under TLS, as TCP ones.
	tlsConfig *tls.Config
	// retry gives each refused connection its own turn for a freed one
	// (a close, or a connection gone idle, which a newcomer may shed).
	retry SlotRetry
	// Counters for the metrics.
	shed    atomic.Uint64
	refused atomic.Uint64
}

// connShard is one shard of the tracker's lists, alone on its cache
// lines.
type connShard struct {
	mu        sync.Mutex
	idle, new connList
	_         [64]byte
}

func newConnTracker(max int, idle, header time.Duration) *connTracker {
	return &connTracker{max: max, grace: newConnGrace, idleTimeout: idle, headerTimeout: header, yields: newYielder(),
		shards: make([]connShard, stripeCount()), releases: newStripedCounter(),
		socketReads: newStripedCounter(), socketWrites: newStripedCounter()}
}

func (t *connTracker) shard(c *trackedConn) *connShard {
	return &t.shards[c.stripe%uint32(len(t.shards))]
}

// lockShards takes every shard's lock, in order (t.mu held).
func (t *connTracker) lockShards() {
	for i := range t.shards {
		t.shards[i].mu.Lock()
	}
}

func (t *connTracker) unlockShards() {
	for i := range t.shards {
		t.shards[i].mu.Unlock()
	}
}

// trackedConn is a connection the tracker counts; closing it frees its slot.
type trackedConn struct {
	net.Conn
	t *connTracker
	// stripe is the connection's in every striped counter (stripes.go);
	// reads and writes are its socket counters'.
	stripe        uint32
	reads, writes *atomic.Uint64

	// Guarded by the connection's shard's mu (t.shard).
	closed     bool
	list       *connList
	prev, next *trackedConn
	since      time.Time // accept time, for the new list
	idleSince  time.Time // when it last went idle, for the idle list

	// waiting is set while the server waits for a request's first bytes
	// (on a new connection or between requests); fresh until the
	// connection's first byte, and under TLS again from the end of the
	// handshake to the first request's first byte.
	waiting, fresh atomic.Bool
	// freshFrom is when the connection last became fresh (unix ns): its
	// accept, or the end of its TLS handshake.
	freshFrom atomic.Int64
	tlsPhase  atomic.Int32
	// readDeadline: the server's last read deadline was not zero. A
	// connection's first bytes arm the header timeout only then: under
	// TLS they may have come with the handshake's last flight, read into
	// the TLS buffer unseen here, and an HTTP/2 server, which clears its
	// deadlines, would find the header timeout armed at the next read.
	readDeadline atomic.Bool
	// rb coalesces small reads; nil reads the socket directly.
	rb *readBuf
	// h2 is set once the client's first bytes are the h2c preface: its
	// flushes yield first (writeyield.go).
	h2 atomic.Bool
}

// A TLS connection's phases: its handshake is bounded like a request's
// headers (from its first byte), and the wait for its first request is
// the idle timeout, as for a cleartext connection.
const (
	tlsBeforeHello int32 = iota
	tlsHandshaking
	tlsHandshaken
)

type connList struct{ head, tail *trackedConn }

func (l *connList) push(c *trackedConn) {
	c.list, c.prev, c.next = l, l.tail, nil
	if l.tail != nil {
		l.tail.next = c
	} else {
		l.head = c
	}
	l.tail = c
}

func (c *trackedConn) unlink() {
	l := c.list
	if l == nil {
		return
	}
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		l.head = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	} else {
		l.tail = c.prev
	}
	c.list, c.prev, c.next = nil, nil, nil
}

// Close frees the connection's slot once, whoever closes it first (the
// HTTP server, or the tracker shedding it).
func (c *trackedConn) Close() error {
	t := c.t
	t.mu.Lock()
	sh := t.shard(c)
	sh.mu.Lock()
	if !c.closed {
		c.closed = true
		c.unlink()
		t.open--
		t.releases.at(c.stripe).Add(1)
	}
	sh.mu.Unlock()
	t.mu.Unlock()
	return closeQuietly(c.Conn)
}

// Read serves a request that arrives just as the server's wait for it
// runs out (--idle-timeout between requests): the server would close the
// connection with the request unread, which resets it, and the client
// loses a request it had every reason to send. Once the first bytes are
// in, reads are the plain connection's.
func (c *trackedConn) Read(p []byte) (int, error) {
	if !c.waiting.Load() {
		return c.readSocket(p)
	}
	n, err := c.readSocket(p)
	if n == 0 && isTimeout(err) && hasUnread(c.Conn) {
		c.Conn.SetReadDeadline(time.Now().Add(c.t.headerTimeout))
		n, err = c.readSocket(p)
	}
	if n > 0 {
		c.waiting.Store(false)
		if c.fresh.Swap(false) {
			c.noteFirstBytes(p[:n])
			// net/http set the header timeout at accept; it runs from
			// here, as it does for a kept-alive connection's next request.
			d := time.Now().Add(c.t.headerTimeout)
			if c.readDeadline.Load() {
				c.Conn.SetReadDeadline(d)
			}
			if c.t.tlsConfig != nil && c.tlsPhase.CompareAndSwap(tlsBeforeHello, tlsHandshaking) {
				// The client's hello: the whole handshake, the server's
				// writes too, must end within the header timeout.
				c.Conn.SetWriteDeadline(d)
			}
		}
	}
	return n, err
}

func (c *trackedConn) readSocket(p []byte) (int, error) {
	if c.rb == nil {
		c.reads.Add(1)
		return c.Conn.Read(p)
	}
	return c.rb.read(c.Conn, p)
}

// hasUnread reports whether the client's bytes wait, read into the
// coalescing buffer or still in the socket.
func (c *trackedConn) hasUnread() bool { return c.rb.buffered() || hasUnread(c.Conn) }

// SetReadDeadline gives a new connection, until its first byte, the idle
// timeout rather than the header timeout net/http sets at accept: an HTTP
// client's pool keeps connections it dialed and then did not need, to use
// them later like kept-alive ones.
func (c *trackedConn) SetReadDeadline(d time.Time) error {
	if d.IsZero() && c.tlsPhase.CompareAndSwap(tlsHandshaking, tlsHandshaken) {
		// net/http clears the deadlines when a handshake succeeds: the
		// connection now waits for its first request, as a new one
		// waits in clear (an HTTPS client's pool keeps connections it
		// dialed, handshake done, for later).
		c.freshFrom.Store(time.Now().UnixNano())
		c.waiting.Store(true)
		c.fresh.Store(true)
	}
	c.readDeadline.Store(!d.IsZero())
	return c.Conn.SetReadDeadline(c.freshDeadline(d))
}

// freshDeadline moves d to the idle timeout while the connection waits
// for its first request. A deadline already past is an abort (net/http
// ends its background read with one after every request), passed as
// it is: under TLS a first request can come with the handshake's last
// flight, read into the TLS buffer without a socket read that would end
// the wait here, and the abort moved to the idle timeout held the
// connection active that long.
func (c *trackedConn) freshDeadline(d time.Time) time.Time {
	if c.fresh.Load() && !d.IsZero() && d.After(time.Now()) {
		if idle := time.Unix(0, c.freshFrom.Load()).Add(c.t.idleTimeout); idle.After(d) {
			return idle
		}
	}
	return d
}

// hasUnread reports whether the client's bytes wait unread on nc, without
// reading them or waiting.
func hasUnread(nc net.Conn) bool {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	unread := false
	rc.Control(func(fd uintptr) {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		unread = err == nil && n > 0
	})
	return unread
}

// closeQuietly closes nc with a FIN before anything else. Closing a socket
// with the client's bytes unread makes the kernel send a reset instead of
// a FIN, and a request that arrived as the server closed (a race no
// HTTP/1.1 server can rule out) then reads "connection reset by peer",
// which tells the client nothing. After a FIN it reads a clean close
// first, which HTTP clients expect of a kept-alive connection, even if the
// reset follows.
func closeQuietly(nc net.Conn) error {
	if cw, ok := nc.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	return nc.Close()
}

// CloseWrite lets the HTTP server half-close a connection it answered with
// Connection: close, as it does on a bare TCP connection, so the client
// sees the end of the answer before the close.
func (c *trackedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// setState is the http.Server's ConnState hook. For one connection the
// server calls it from one goroutine at a time; the tracker may close the
// connection concurrently, after which its state no longer matters.
func (t *connTracker) setState(nc net.Conn, st http.ConnState) {
	c, ok := trackedOf(nc)
	if !ok {
		return
	}
	sh := t.shard(c)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if c.closed {
		return
	}
	c.unlink()
	switch st {
	case http.StateNew:
		sh.new.push(c)
	case http.StateIdle:
		c.waiting.Store(true)
		c.idleSince = time.Now()
		sh.idle.push(c)
		t.releases.at(c.stripe).Add(1)
	}
}

// admit takes a slot for a freshly accepted connection, shedding the
// longest-idle connection if there is no free one. It returns nil if every
// connection is busy.
func (t *connTracker) admit(nc net.Conn) *trackedConn {
	c := &trackedConn{Conn: nc, t: t, since: time.Now(), stripe: t.nextStripe.Add(1)}
	c.reads, c.writes = t.socketReads.at(c.stripe), t.socketWrites.at(c.stripe)
	if t.coalesce && t.tlsConfig == nil {
		// Not under TLS: crypto/tls already reads records in chunks
		// of its own, so there is little to coalesce, and with the
		// buffer an idle h2 connection at the cap was sometimes never
		// shed for a newcomer (TestTLSIdleH2ConnIsShed failed 2 runs in
		// 80 with it, 0 in 80 without; the likely path: bytes left in
		// this buffer made the connection look busy to the shedding,
		// which then dropped it from the idle list; it no longer drops
		// any, see victimLocked).
		c.rb = newReadBuf(nc, c.reads)
	}
	c.waiting.Store(true)
	c.fresh.Store(true)
	c.freshFrom.Store(c.since.UnixNano())
	t.mu.Lock()
	t.foldReleasesLocked()
	var victim *trackedConn
	if t.open >= t.max {
		victim = t.takeVictimLocked(c.since)
		if victim == nil {
			t.mu.Unlock()
			return nil
		}
	}
	t.open++
	t.mu.Unlock()
	if victim != nil {
		t.shed.Add(1)
		closeQuietly(victim.Conn)
	}
	return c
}

// foldReleasesLocked tells retry of the slots freed since the last fold
// (t.mu held).
func (t *connTracker) foldReleasesLocked() {
	if n := t.releases.Load(); n != t.folded {
		t.retry.ReleasedMany(n - t.folded)
		t.folded = n
	}
}

// takeVictimLocked sheds (marks closed and unlists; the caller closes
// it) the connection idle longest, else the oldest one that has sent
// nothing for newConnGrace, and returns it; nil if there is none (t.mu
// held). One whose client's bytes have arrived, unread yet, is passed
// over, not closed on them, and stays where it is: an HTTP/1.1 request
// takes it out of the list when the server reads it, but an HTTP/2
// control frame (a PING, a WINDOW_UPDATE) opens no stream, so the server
// would never report that connection idle again, and dropped from the
// list it could never be shed. At most maxVictimScan connections are
// looked at (one peek each), over all shards.
func (t *connTracker) takeVictimLocked(now time.Time) *trackedConn {
	t.lockShards()
	defer t.unlockShards()
	n := 0
	victim := t.oldestLocked(&n, true, now)
	if victim == nil {
		victim = t.oldestLocked(&n, false, now)
	}
	if victim != nil {
		victim.closed = true
		victim.unlink()
		t.open--
	}
	return victim
}

// oldestLocked walks the shards' idle lists, or new ones, (each oldest
// first) as one list, oldest first, and returns the first connection
// with no unread bytes; a new one only if silent for t.grace, the walk
// ending at the first that is not. It stops after *n connections in all
// have been looked at, maxVictimScan (every shard locked).
func (t *connTracker) oldestLocked(n *int, idle bool, now time.Time) *trackedConn {
	var at [maxStripes]*trackedConn
	heads := at[:len(t.shards)]
	for i := range t.shards {
		if idle {
			heads[i] = t.shards[i].idle.head
		} else {
			heads[i] = t.shards[i].new.head
		}
	}
	for *n < maxVictimScan {
		oldest := -1
		for i, c := range heads {
			if c != nil && (oldest < 0 || c.listedSince(idle).Before(heads[oldest].listedSince(idle))) {
				oldest = i
			}
		}
		if oldest < 0 {
			return nil
		}
		c := heads[oldest]
		if !idle && now.Sub(c.since) < t.grace {
			return nil
		}
		*n++
		if !c.hasUnread() {
			return c
		}
		heads[oldest] = c.next
	}
	return nil
}

// listedSince is what orders c in its idle list, or new one.
func (c *trackedConn) listedSince(idle bool) time.Time {
	if idle {
		return c.idleSince
	}
	return c.since
}

// maxVictimScan bounds the connections one shedding peeks at, so that a
// crowd of connections whose bytes sit unread cannot make every accept
// at the cap a long walk of system calls.
const maxVictimScan = 64

// shedOne closes the longest-idle connection, if any, to free a
// descriptor when accept ran out of them despite the cap (something else
// in the process holds more files than the reserve allows for).
func (t *connTracker) shedOne() {
	t.mu.Lock()
	victim := t.takeVictimLocked(time.Now())
	t.mu.Unlock()
	if victim != nil {
		t.shed.Add(1)
		closeQuietly(victim.Conn)
	}
}

// closeSilent closes the new connections that have sent nothing for
// grace.
func (t *connTracker) closeSilent(now time.Time, grace time.Duration) {
	t.mu.Lock()
	var victims []*trackedConn
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		for c := sh.new.head; c != nil && now.Sub(c.since) >= grace; c = sh.new.head {
			c.unlink()
			if c.hasUnread() {
				continue // not silent: its request is here
			}
			c.closed = true
			t.open--
			victims = append(victims, c)
		}
		sh.mu.Unlock()
	}
	t.mu.Unlock()
	for _, c := range victims {
		closeQuietly(c.Conn)
	}
}

func (t *connTracker) openConns() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.open
}

// refusal is the whole answer to a connection over the cap. It is HTTP/1.1
// whatever the client speaks: an h2c client with prior knowledge reads it
// as a malformed frame and fails at once, which is still no hang.
// Its Retry-After is the connection's own turn for a freed connection
// (SlotRetry), so refused clients come back spread out, not together.
func (t *connTracker) refusal() []byte {
	t.mu.Lock()
	t.foldReleasesLocked()
	t.mu.Unlock()
	after := strconv.Itoa(RetryAfterSeconds(t.retry.Refused()))
	body := `{"error":"the server is at its connection limit (` + strconv.Itoa(t.max) +
		` connections, all busy); retry after ` + after + ` s (Retry-After)"}` + "\n"
	return []byte("HTTP/1.1 503 Service Unavailable\r\n" +
		"Content-Type: application/json\r\n" +
		"Retry-After: " + after + "\r\n" +
		"Connection: close\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
}

// refuse answers a connection that got no slot and closes it. It waits
// for the client's first bytes before answering, because an HTTP client
// drops an answer that comes before its request as unsolicited; then it
// drains the request for a moment, because closing a socket with unread
// data resets it and the client could lose the answer. A client that sends
// nothing gets the answer when the wait ends. Up to maxRefusing refusals
// wait like this at once; past that a connection is answered and closed
// at once, the FIN ahead of any reset, which a client may see as a closed
// connection but never as a hang.
func (t *connTracker) refuse(c net.Conn) {
	t.refused.Add(1)
	msg := t.refusal()
	if t.refusing.Add(1) > maxRefusing {
		t.refusing.Add(-1)
		if t.tlsConfig != nil {
			// No time for a handshake, and an answer in clear is noise
			// to a TLS client: a plain close it reports at once.
			closeQuietly(c)
			return
		}
		// A fresh socket's send buffer is empty, so this write does not
		// wait; the deadline only guards against the unexpected.
		c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		c.Write(msg)
		closeQuietly(c)
		return
	}
	if t.tlsConfig != nil {
		c = refusalTLS(c, t.tlsConfig)
	}
	go func() {
		defer t.refusing.Add(-1)
		defer c.Close()
		c.SetDeadline(time.Now().Add(refuseLinger))
		var buf [4096]byte
		if _, err := c.Read(buf[:]); err != nil && !isTimeout(err) {
			return
		}
		c.SetDeadline(time.Now().Add(refuseLinger))
		if _, err := c.Write(msg); err != nil {
			return
		}
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
		io.Copy(io.Discard, io.LimitReader(c, 64<<10))
	}()
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// limitListener admits connections through the tracker.
type limitListener struct {
	net.Listener
	t *connTracker
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		nc, err := l.Listener.Accept()
		if err != nil {
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				// The server retries after a pause; make sure there is
				// then a descriptor to accept with.
				l.t.shedOne()
			}
			return nil, err
		}
		if c := l.t.admit(nc); c != nil {
			return c, nil
		}
		l.t.refuse(nc)
	}
}
