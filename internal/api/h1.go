package api

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The lean HTTP/1.1 path.
//
// net/http's HTTP/1.1 server spends, per request, more than Surge's
// hot routes do: a goroutine that reads one byte ahead to notice a
// client gone away, a new header map and Request, a cancellable context,
// several deadline updates, and a buffered, possibly chunked writer. On
// cleartext connections the listener therefore serves requests itself,
// in a loop per connection: it parses each head, reads its body whole,
// and runs the SAME handler (collapseSlashes, the gate, admission, the
// mux, metrics, the route) with a per-connection Request, header map and
// writer reused from request to request, the answer written in one
// write. It serves only what it supports exactly (parseHead) on routes
// marked lean (LeanRoutes); at the first other request it hands the
// connection, with every byte it has read and not answered, to net/http,
// which serves the rest of it as it always does. TLS connections go to
// net/http at once, h2c ones too unless the lean HTTP/2 server (h2.go)
// takes them.
const (
	// leanBufSize holds a request's head and body: a request that does
	// not fit goes to net/http, whose limits (MaxHeaderBytes, the
	// route's body limit) then answer it.
	leanBufSize = 8 << 10
	// rstAvoidanceDelay is net/http's: how long a connection closed after
	// a body over its limit waits, its write side shut, before it closes,
	// so the client reads the answer rather than a reset.
	rstAvoidanceDelay = 500 * time.Millisecond
	// leanShutdownPoll is how often Shutdown looks for connections done.
	leanShutdownPoll = 10 * time.Millisecond
	// panicStackBytes is how much of a panicking handler's stack is
	// logged, net/http's amount.
	panicStackBytes = 64 << 10
)

// h1Server is a Server's lean path.
type h1Server struct {
	s       *Server
	routes  *LeanRoutes
	handoff chan net.Conn // to net/http's Accept
	done    chan struct{} // closed at Shutdown or Close
	stop    sync.Once

	leanConns[*h1Conn]

	// Counters, for tests and the metrics: requests served (in the
	// connections' stripes, stripes.go), connections handed to net/http.
	served    stripedCounter
	handedOff atomic.Uint64
}

func newH1Server(s *Server, routes *LeanRoutes) *h1Server {
	return &h1Server{s: s, routes: routes, handoff: make(chan net.Conn), done: make(chan struct{}), served: newStripedCounter()}
}

func (h *h1Server) logf(format string, args ...any) { h.s.logf(format, args...) }

// h1Listener gives net/http the connections the lean path hands off,
// and the accept errors, on which net/http backs off or stops.
type h1Listener struct {
	net.Listener // limitListener
	h            *h1Server
	errs         chan error
	start        sync.Once
}

func (l *h1Listener) Accept() (net.Conn, error) {
	l.start.Do(func() { go l.acceptLoop() })
	select {
	case c := <-l.h.handoff:
		return c, nil
	case err := <-l.errs:
		return nil, err
	case <-l.h.done:
		return nil, http.ErrServerClosed
	}
}

func (l *h1Listener) acceptLoop() {
	for {
		nc, err := l.Listener.Accept()
		if err != nil {
			select {
			case l.errs <- err: // net/http's next Accept waits its back-off
			case <-l.h.done:
				return
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		go l.h.serve(nc.(*trackedConn))
	}
}

// h1Conn is one connection on the lean path, with what it reuses from
// request to request.
type h1Conn struct {
	h      *h1Server
	tc     *trackedConn
	ctx    context.Context // the connection's, as net/http's ConnContext makes it
	remote string
	buf    []byte
	r, w   int // unconsumed bytes: buf[r:w]
	// The read deadline the next read must have and the one set last;
	// the answer's write deadline and the one set last.
	readBy, readSet, writeBy, writeSet time.Time
	idle                               atomic.Bool
	// Whether a handler runs, and its client watch (h1_watch.go): the
	// context the watch cancels and its cancel.
	serving    bool
	watching   bool
	unwatching atomic.Bool
	watched    chan struct{}
	watchCtx   context.Context
	watchStop  context.CancelFunc
	head       h1Head
	// The request its handler gets, made anew from blank (no fields but
	// the connection's context) for each: a request of its own each time
	// (http.Request.WithContext) was two allocations per reservation. A
	// lean route's handler does not keep it past its return (LeanRoutes),
	// as it does not keep its header map, which the connection reuses too.
	req, blank http.Request
	url        url.URL
	vals       headerVals
	hdr        http.Header
	body       h1Body
	rw         h1Writer
	out        []byte
	leanMemo   leanMemo
	route      leanTarget // the request's match, in leanMemo
}

func (h *h1Server) serve(tc *trackedConn) {
	c := &h1Conn{h: h, tc: tc, buf: make([]byte, leanBufSize), hdr: http.Header{}}
	c.head.url, c.head.vals = &c.url, &c.vals
	c.rw = h1Writer{c: c, header: http.Header{}, clen: -1}
	if !h.add(c) {
		tc.Close()
		return
	}
	c.ctx = connCtx(h.s.connContext(tc), c)
	c.blank = *new(http.Request).WithContext(c.ctx)
	tc.t.setState(tc, http.StateNew)
	if tc.rb == nil {
		// A connection whose bytes cannot be put back (not a socket):
		// net/http's from the start.
		c.handOff()
		return
	}
	if c.loop() {
		return // handed off: net/http closes it
	}
	h.remove(c)
	tc.t.setState(tc, http.StateClosed)
	tc.Close()
}

// loop serves the connection's requests; it returns true if it handed
// the connection to net/http.
func (c *h1Conn) loop() (handedOff bool) {
	t := c.tc.t
	for {
		t0 := time.Now()
		c.readBy = t0.Add(t.headerTimeout)
		switch c.readHead() {
		case headHandOff:
			if h2 := c.h.s.h2; h2.takesOver(c) {
				h2.serveFrom(c)
				return true // closed by serveFrom
			}
			return c.handOff()
		case headMore:
			return false // closed, timed out or shutting down
		}
		t.setState(c.tc, http.StateActive)
		if !c.readBody(t0) {
			// The body ended early: net/http's handler sees that, as
			// it would.
			return c.handOff()
		}
		if !c.serveOne() || c.h.shutting.Load() {
			return false
		}
		if c.r < c.w {
			continue // the next request is already here: never idle, never shed
		}
		t.setState(c.tc, http.StateIdle)
		if !c.awaitNext() {
			return false
		}
	}
}

// readHead reads until buf[r:] starts with a whole head, and says
// whether the lean path serves it.
func (c *h1Conn) readHead() headStatus {
	for {
		if c.h.shutting.Load() {
			return headMore
		}
		clear(c.hdr)
		st := parseHead(c.buf[c.r:c.w], &c.head, c.hdr, leanBufSize)
		switch {
		case st == headLean && !c.fits():
			return headHandOff
		case st == headLean:
			return c.routed()
		case st == headHandOff:
			return st
		}
		if c.w == len(c.buf) {
			if c.r == 0 {
				return headHandOff // too long for us: net/http's MaxHeaderBytes
			}
			c.w = copy(c.buf, c.buf[c.r:c.w])
			c.r = 0
		}
		n, err := c.read()
		if err != nil && n == 0 {
			if c.r < c.w && !isTimeout(err) {
				// A partial request and then the end: net/http's answer.
				return headHandOff
			}
			return headMore
		}
	}
}

// fits: the head and its body fit in the buffer (moved to its start).
func (c *h1Conn) fits() bool {
	need := int64(c.head.size) + max(c.head.contentLength, 0)
	if need > int64(len(c.buf)) {
		return false
	}
	if int64(c.r)+need > int64(len(c.buf)) {
		at := cap(c.buf[c.r:]) - cap(c.head.target) // the target's offset in the head
		c.w = copy(c.buf, c.buf[c.r:c.w])
		c.r = 0
		c.head.target = c.buf[at : at+len(c.head.target)]
	}
	return true
}

// routed builds the request and asks the routes whether it is lean.
func (c *h1Conn) routed() headStatus {
	c.req = c.blank
	r := &c.req
	r.Method, r.URL, r.Proto, r.ProtoMajor, r.ProtoMinor = c.head.method, c.head.url, "HTTP/1.1", 1, 1
	r.Header, r.Host, r.RequestURI, r.RemoteAddr = c.hdr, c.head.host, c.head.uri, c.remoteAddr()
	r.ContentLength, r.Body = max(c.head.contentLength, 0), http.NoBody
	if c.route.m = c.h.routes.match(&c.req, &c.leanMemo); c.route.m == nil {
		return headHandOff
	}
	return headLean
}

func (c *h1Conn) remoteAddr() string {
	if c.remote == "" {
		c.remote = c.tc.RemoteAddr().String()
	}
	return c.remote
}

// readBody reads the request's body into the buffer, within the read
// timeout from the head's start as net/http bounds it. A body cut by
// that timeout is served here, the handler reading the bytes that came
// and then the timeout, as net/http's would: handed off, it would get
// a second read timeout of net/http's and could finish. It returns
// false for a body that ended early, for net/http.
func (c *h1Conn) readBody(t0 time.Time) bool {
	lim := c.h.s.lim
	c.readBy = t0.Add(lim.ReadTimeout)
	c.writeBy = loosely(c.writeSet, time.Now().Add(lim.WriteTimeout), lim.WriteTimeout)
	end := c.r + c.head.size + int(max(c.head.contentLength, 0))
	var cut error
	for c.w < end {
		n, err := c.read()
		if err == nil || n > 0 {
			continue
		}
		if !isTimeout(err) {
			return false
		}
		cut, end = err, c.w
	}
	c.body = h1Body{b: c.buf[c.r+c.head.size : end], eof: end == c.r+c.head.size, err: cut}
	if c.head.contentLength > 0 {
		c.req.Body = &c.body
	}
	c.r = end
	return true
}

// writeAnswer writes the rendered answer. A large one that holds a slot
// (lent or kept, h1Writer.dropSlot) or a turn (Turns) is written a part
// at a time, each within the stall rule of a lean HTTP/2 answer
// (--stall-timeout, or keptStall for a kept slot or a turn alone) rather
// than all of it within the write timeout: a client that does not read
// loses its connection once it makes no progress for that long, so that
// clients that do not read cannot hold the slots, and the turns, of
// everyone else for 30 s.
func (c *h1Conn) writeAnswer() error {
	w := &c.rw
	if (w.slot == nil && len(w.written) == 0) || len(c.out) <= largeAnswer {
		_, err := c.tc.Write(c.out)
		return err
	}
	stall := c.h.s.lim.StallTimeout
	if w.slot == nil || w.lent == 0 {
		stall = min(stall, keptStall) // a kept slot, or a turn alone
	}
	for out := c.out; len(out) > 0; {
		n := min(len(out), largeAnswer)
		by := time.Now().Add(stall)
		if by.After(c.writeBy) {
			by = c.writeBy
		}
		c.tc.SetWriteDeadline(by)
		if _, err := c.tc.Write(out[:n]); err != nil {
			c.writeSet = time.Time{} // moved: set again before the next write
			return err
		}
		out = out[n:]
	}
	c.tc.SetWriteDeadline(c.writeBy)
	return nil
}

// serveOne runs the handler on the request read and writes its answer;
// it returns whether the connection stays open.
func (c *h1Conn) serveOne() (keep bool) {
	c.rw.reset()
	defer c.rw.answered()
	// The connection's context, not cancellable (h1_watch.go says why).
	r := &c.req
	c.serving, c.route.req = true, r
	defer func() {
		c.route.req, c.route.direct = nil, false
		c.unwatch()
		if v := recover(); v != nil {
			keep = false
			if v == http.ErrAbortHandler {
				return
			}
			// As net/http answers a handler's panic: logged, and the
			// connection closed without an answer.
			buf := make([]byte, panicStackBytes)
			buf = buf[:runtime.Stack(buf, false)]
			c.h.logf("http: panic serving %v: %v\n%s", c.remoteAddr(), v, buf)
		}
	}()
	c.h.s.srv.Handler.ServeHTTP(&c.rw, r)
	c.unwatch()
	c.h.served.at(c.tc.stripe).Add(1)
	if c.body.err != nil {
		// net/http's finishRequest: the rest of a cut body is on the wire,
		// not to be read as the next request.
		c.rw.closeAfter = true
	}
	c.rw.render(c.h.shutting.Load())
	// The deadline net/http sets once the request is read, set only now
	// that it matters, and only when it moves (loosely).
	if c.writeBy != c.writeSet {
		c.tc.SetWriteDeadline(c.writeBy)
		c.writeSet = c.writeBy
	}
	if err := c.writeAnswer(); err != nil {
		return false
	}
	if cap(c.out) > leanBufSize*8 {
		c.out = nil // a rare large answer's buffer is not kept
	}
	if c.rw.tooLarge {
		// net/http's closeWriteAndWait: the client's unread body would
		// otherwise turn the close into a reset that loses the answer.
		c.tc.CloseWrite()
		time.Sleep(rstAvoidanceDelay)
	}
	return !c.rw.closeAfter && !c.rw.short()
}

// awaitNext waits up to the idle timeout for the next request's first
// bytes.
func (c *h1Conn) awaitNext() bool {
	c.r, c.w = 0, 0
	c.idle.Store(true)
	defer c.idle.Store(false)
	if c.h.shutting.Load() {
		return false
	}
	idle := c.h.s.lim.IdleTimeout
	c.readBy = loosely(c.readSet, time.Now().Add(idle), idle)
	n, err := c.read()
	return n > 0 || err == nil
}

// read reads more of the request into the buffer within readBy, which
// it sets only for a read that happens: a request whose bytes arrived
// in one read (the common case) costs no timer update for its header
// and body deadlines.
func (c *h1Conn) read() (int, error) {
	if c.readBy != c.readSet {
		c.tc.SetReadDeadline(c.readBy)
		c.readSet = c.readBy
	}
	n, err := c.tc.Read(c.buf[c.w:])
	c.w += n
	return n, err
}

// deadlineSlack is how much later than asked, as a part of its timeout,
// a kept-alive connection's idle and write deadlines may fall. net/http
// moves both on every request; each move is a timer update in the runtime,
// together 2 % of a small request's CPU in profiles of the lean path.
// Loosened, a busy connection moves each about once per sixteenth of its
// timeout, and a timeout of T fires between T and T + T/16 after its
// start (the default idle timeout of 30 s ends between 30 and 31.9 s).
const deadlineSlack = 16

// loosely returns the deadline to have when one at d is asked for: the
// one set, if it is no earlier than d and within d's slack, else d plus
// the slack, so that later requests' asks fall within it.
func loosely(set, d time.Time, timeout time.Duration) time.Time {
	slack := timeout / deadlineSlack
	if !set.Before(d) && !set.After(d.Add(slack)) {
		return set
	}
	return d.Add(slack)
}

// handOff gives the connection to net/http with the bytes read and not
// served, which it reads first.
func (c *h1Conn) handOff() bool {
	c.h.remove(c)
	if c.r < c.w {
		c.tc.putBack(c.buf[c.r:c.w])
	}
	c.tc.handedOff()
	c.tc.SetReadDeadline(time.Time{})
	c.tc.SetWriteDeadline(time.Time{})
	c.readSet, c.writeSet = time.Time{}, time.Time{}
	select {
	case c.h.handoff <- c.tc:
		c.h.handedOff.Add(1)
	case <-c.h.done:
		c.tc.Close()
	}
	return true
}

// shutdown keeps the lean connections from taking new requests, closes
// the idle ones, and waits for the others until ctx is done.
func (h *h1Server) shutdown(ctx context.Context) error {
	h.shutting.Store(true)
	h.stop.Do(func() { close(h.done) })
	return h.drain(ctx, func(c *h1Conn) {
		if c.idle.Load() {
			c.tc.Close()
		}
	})
}

// close closes every lean connection at once.
func (h *h1Server) close() {
	h.shutting.Store(true)
	h.stop.Do(func() { close(h.done) })
	h.each(func(c *h1Conn) { c.tc.Close() })
}

var _ io.Reader = (*h1Body)(nil)

// putBack makes p the next bytes the connection's reads return (the
// lean path's buffered bytes, for net/http), ahead of any still in the
// coalescing buffer; the tracker counts them as unread, so the
// connection is not shed on them.
func (c *trackedConn) putBack(p []byte) {
	b := c.rb
	b.mu.Lock()
	defer b.mu.Unlock()
	nb := make([]byte, 0, len(p)+b.w-b.r)
	nb = append(nb, p...)
	if b.buf != nil {
		nb = append(nb, (*b.buf)[b.r:b.w]...)
	}
	b.release()
	b.buf, b.r, b.w = &nb, 0, len(nb)
	b.held.Store(int64(len(nb)))
}

// handedOff restarts the connection's time as new: net/http starts it
// in StateNew, and a connection the lean path served for longer than
// newConnGrace must not look silent for that.
func (c *trackedConn) handedOff() {
	sh := c.t.shard(c)
	sh.mu.Lock()
	c.since = time.Now()
	sh.mu.Unlock()
}

func (h *h1Server) register(reg prometheus.Registerer) {
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "surge_http1_lean_requests_total",
			Help: "HTTP/1.1 requests served by the lean path (--http1-lean) rather than net/http.",
		}, func() float64 { return float64(h.served.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "surge_http1_lean_handoffs_total",
			Help: "Cleartext connections the lean path handed to net/http (h2c, or a request it does not serve: another route, an unusual header, a large body); net/http serves the rest of each.",
		}, func() float64 { return float64(h.handedOff.Load()) }),
	)
}
