package api

import (
	"bytes"
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The lean HTTP/2 server (--http2-lean).
//
// net/http's HTTP/2 server gives every stream, before any handler can
// decide anything, a goroutine, a 4 KiB write buffer, a Request and a
// cancellable context: some 10 KB, and a stack the collector scans every
// cycle. In a flash crowd tens of thousands of streams wait in the
// waiting room for an in-flight slot, and that cost is most of the
// server's. So cleartext prior-knowledge connections (h2c) and, over
// TLS, those that negotiate "h2" (h2_tls.go) are served here instead: a
// stream is a record (h2Stream) that holds its request
// and, on a lean route, its whole body, until it is dispatched; only then
// does a goroutine run the same handler chain net/http's would, with a
// ResponseWriter that behaves, as the client can see it, like net/http's.
// The frames are read and written with golang.org/x/net/http2's Framer
// and hpack; the connection and stream machinery is our own, because
// net/http's ties a stream to its handler goroutine from the start.
const (
	// h2HandlerChunk is net/http's per-stream write buffer: a handler's
	// answer that ends within it, unflushed, gets a Content-Length.
	h2HandlerChunk = 4 << 10
	// h2RecvWindow is the flow-control window advertised per stream and
	// per connection (net/http's MaxUploadBufferPerStream and
	// ...PerConnection defaults): a client sends at most this much of
	// the bodies on a connection before handlers read them.
	h2RecvWindow = 1 << 20
	// h2MaxReadFrameSize is the largest frame we accept (net/http's
	// SETTINGS_MAX_FRAME_SIZE).
	h2MaxReadFrameSize = 1 << 20
	// h2HeaderTableSize is the HPACK table size, both ways (the
	// protocol's default, net/http's).
	h2HeaderTableSize = 4096
	// h2InflowMinRefresh: unread-body credit is returned in
	// WINDOW_UPDATEs of at least this many bytes (net/http's).
	h2InflowMinRefresh = 4 << 10
	// h2MaxQueuedControl bounds the control frames (PING and SETTINGS
	// acks, resets) queued while the socket does not take them: a client
	// that floods them without reading is cut (net/http's bound).
	h2MaxQueuedControl = 10000
	// h2MaxPending bounds the bytes a connection holds encoded and not
	// yet written: a handler whose DATA would pass it waits for the
	// socket, so a client that does not read pins no more than this.
	h2MaxPending = 256 << 10
	// h2GoAwayLinger is how long a connection that sent GOAWAY stays
	// open for the client to read it before it is closed (net/http's
	// goAwayTimeout): a close with the client's bytes unread would reset
	// the connection and could lose the GOAWAY.
	h2GoAwayLinger = time.Second
	// h2MaxSettings bounds the settings in one SETTINGS frame
	// (net/http's).
	h2MaxSettings = 100
	// h2MaxEarlyResets: a connection may have this many times
	// MaxStreams streams waiting for a handler (their handlers started
	// as others end, the client having reset streams whose handlers
	// still run) before it is closed with ENHANCE_YOUR_CALM: net/http's
	// bound on rapid reset.
	h2MaxEarlyResets = 4
	// h2WorkerIdle is how long a handler goroutine whose stream is done
	// waits for another stream to run before it exits. A new goroutine
	// per stream starts with a small stack and grows it through the
	// handler chain and the engine (copystack was a fifth of the lean
	// server's CPU profile); a kept one has grown it already.
	h2WorkerIdle = time.Second
)

// h2PrefaceStart is what the lean HTTP/1.1 loop sees of the h2c preface
// before it gives up on the head: the preface's first line and blank
// line.
var h2PrefaceStart = []byte(h2cPreface[:18])

// h2Server is a Server's lean HTTP/2 server.
type h2Server struct {
	s *Server
	leanConns[*h2Conn]
	// pool runs streams' handlers (h2_workers.go); stop closes it once,
	// at Shutdown or Close. conns counts connections, to spread them
	// over the pool's shards.
	pool  *h2Pool
	stop  sync.Once
	nconn atomic.Uint64
	// Counters, for tests and the metrics; served is counted in the
	// connections' stripes (stripes.go).
	served stripedCounter
	conned atomic.Uint64
}

func newH2Server(s *Server) *h2Server {
	h := &h2Server{s: s, served: newStripedCounter()}
	h.pool = newH2Pool(func(st *h2Stream) { st.c.runHandler(st) })
	return h
}

// run runs the stream's handler on an idle handler goroutine, or a new
// one.
func (h *h2Server) run(st *h2Stream) { h.pool.run(st.c.shard, st) }

// takesOver reports whether the lean HTTP/1.1 loop's connection, whose
// first bytes it could not parse, is h2c for this server.
func (h *h2Server) takesOver(c *h1Conn) bool {
	return h != nil && c.tc.h2.Load() && bytes.HasPrefix(c.buf[c.r:c.w], h2PrefaceStart)
}

// serveFrom serves the h1 loop's connection as h2c, starting with the
// bytes that loop read.
func (h *h2Server) serveFrom(c *h1Conn) {
	c.h.remove(c)
	read := append([]byte(nil), c.buf[c.r:c.w]...)
	// The HTTP/1.1 loop's buffers would live as long as the connection,
	// its goroutine running this one.
	c.buf, c.out, c.r, c.w = nil, nil, 0, 0
	tc := c.tc
	hc := newH2Conn(h, tc, read)
	if !h.add(hc) {
		tc.t.setState(tc, http.StateClosed)
		tc.Close()
		return
	}
	h.conned.Add(1)
	hc.serve()
	h.remove(hc)
	tc.t.setState(tc, http.StateClosed)
	tc.Close()
}

func (h *h2Server) logf(format string, args ...any) { h.s.logf(format, args...) }

// shutdown sends every connection GOAWAY, lets their streams finish and
// waits for them to close, until ctx is done.
func (h *h2Server) shutdown(ctx context.Context) error {
	if h == nil {
		return nil
	}
	h.shutting.Store(true)
	h.stop.Do(h.pool.close)
	return h.drain(ctx, (*h2Conn).startGracefulShutdown)
}

// close closes every connection at once.
func (h *h2Server) close() {
	if h == nil {
		return
	}
	h.shutting.Store(true)
	h.stop.Do(h.pool.close)
	h.each(func(c *h2Conn) { c.tc.Close() })
}

func (h *h2Server) register(reg prometheus.Registerer) {
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "surge_http2_lean_streams_total",
			Help: "HTTP/2 streams whose handler the lean HTTP/2 server (--http2-lean) ran.",
		}, func() float64 { return float64(h.served.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "surge_http2_lean_connections_total",
			Help: "HTTP/2 connections (h2c, or TLS with ALPN h2) served by the lean HTTP/2 server rather than net/http.",
		}, func() float64 { return float64(h.conned.Load()) }),
	)
}
