// Package api holds the HTTP listener shared by every workload: one port that
// speaks HTTP/1.1 and cleartext HTTP/2 (h2c, prior knowledge), with limits
// set so a slow or hostile client cannot hold resources forever.
package api

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// MaxHeaderBytes bounds request headers; bodies are bounded per route.
const MaxHeaderBytes = 64 << 10

// Defaults of the zero Limits.
const (
	DefaultIdleTimeout = 30 * time.Second
	// Every open stream costs a goroutine and buffers before any handler
	// can refuse it, and all of a connection's answers share one write
	// queue: 40 connections of 1,000 streams took a server to 1.4 GB and
	// a p99 of seconds, where 128 per connection (nginx's default) kept it
	// at 250 MB and 0.3 s. A client that wants more opens more connections
	// (Go's does by itself), which --max-conns and --max-inflight bound.
	DefaultMaxStreams  = 128
	DefaultMaxInflight = 4096
	// Whole-request limits, so a client that trickles a body or never
	// reads its answer cannot hold a handler forever. Streams and long
	// polls lift them (OpenStream) and are bounded by StallTimeout and
	// StreamBuffer instead.
	DefaultReadTimeout  = 30 * time.Second
	DefaultWriteTimeout = 30 * time.Second
	// DefaultReadHeaderTimeout bounds a request's headers, from their
	// first byte, so a client that trickles them cannot hold a handler.
	DefaultReadHeaderTimeout = 10 * time.Second
)

// Limits bound what clients can hold. The zero value means the defaults.
type Limits struct {
	// MaxConns caps open client connections. 0 derives it from the open-file
	// limit (RLIMIT_NOFILE) minus a reserve for the log, snapshots and the
	// listener; see ConnLimit.
	MaxConns int
	// IdleTimeout closes a keep-alive connection with no request in flight,
	// or a new one that has sent nothing, after this long (0:
	// DefaultIdleTimeout).
	IdleTimeout time.Duration
	// MaxStreams is the SETTINGS_MAX_CONCURRENT_STREAMS an h2c connection is
	// given (0: DefaultMaxStreams).
	MaxStreams int
	// MaxInflight caps requests being handled at once over all connections
	// (0: DefaultMaxInflight); beyond it a request waits in the waiting
	// room for a slot, first come first served.
	MaxInflight int
	// MaxWait is the waiting room's patience (0: DefaultMaxWait): a
	// request whose predicted wait for a slot is longer gets 503 at once,
	// with Retry-After = that predicted wait.
	MaxWait time.Duration
	// WaitingRoom caps the requests waiting for a slot (0:
	// DefaultWaitingRoom); beyond it 503 with Retry-After = the predicted
	// time for the room to drain.
	WaitingRoom int
	// ReadTimeout and WriteTimeout bound a whole request and its answer
	// (0: DefaultReadTimeout, DefaultWriteTimeout), except streams and
	// long polls.
	ReadTimeout, WriteTimeout time.Duration
	// ReadHeaderTimeout bounds a request's headers from their first byte
	// (0: DefaultReadHeaderTimeout).
	ReadHeaderTimeout time.Duration
	// StallTimeout ends a stream or long poll whose write has blocked
	// this long (0: DefaultStallTimeout).
	StallTimeout time.Duration
	// StreamBuffer bounds the bytes all streams and long polls hold
	// rendered and not yet written (0: DefaultStreamBuffer); at least
	// StreamPageBytes.
	StreamBuffer int64
	// BodyMemory is the body budget (BodyBudget): bytes of large request
	// bodies held at once (0: DefaultBodyMemory).
	BodyMemory int64
	// Exempt lists paths the in-flight cap does not apply to, so a health
	// checker, the metrics scraper and a profiler still get through an
	// overload. A path ending in "/" exempts every path under it.
	Exempt []string
	// StandardConns reads and writes client connections as net/http
	// alone does: every read from the socket (not small reads served from
	// one socket read, readbuf.go) and every h2c flush at once (not after
	// a yield that lets a batch's replies join it, writeyield.go). Only
	// `surge bench`'s do-nothing server sets it: it stands for the
	// standard Go stack, which Surge's cost is measured against.
	StandardConns bool
	// Lean, if set, are the routes the lean HTTP/1.1 path serves
	// (h1.go): cleartext HTTP/1.1 requests to them are parsed and
	// answered by the listener's own loop, every other request by
	// net/http. Nil serves every request through net/http
	// (--http1-lean=false).
	Lean *LeanRoutes
	// LeanH2 serves cleartext HTTP/2 connections (h2c, prior knowledge)
	// and, under ServeTLS, those that negotiate "h2" (h2_tls.go) with the
	// lean HTTP/2 server (h2*.go) instead of net/http's, every route on
	// them. It takes effect only with the listener's own loop (Lean set,
	// StandardConns false), which sees the connection preface.
	LeanH2 bool
	// Gate, if set, wraps the admission: it sees every request before
	// the request takes an in-flight slot or waits for one, so what it
	// refuses (authentication) costs no slot. On the lean HTTP/2 server
	// a lean route's request waiting for a slot is parked (park.go): the
	// gate's next returns before the request is served. A gate that
	// counts a call until next returns marks it NoParking.
	Gate func(http.Handler) http.Handler
}

func (l Limits) gate(h http.Handler) http.Handler {
	if l.Gate == nil {
		return h
	}
	return l.Gate(h)
}

// Resolve fills in the defaults and checks the limits against the process's
// open-file limit. Call it after the Go runtime has started: Go raises the
// soft RLIMIT_NOFILE to the hard one at startup, and that raised value is
// what connections can use.
func (l Limits) Resolve() (Limits, error) {
	switch {
	case l.MaxConns < 0:
		return l, fmt.Errorf("--max-conns %d: must be 0 (derive from the open-file limit) or more", l.MaxConns)
	case l.IdleTimeout < 0:
		return l, fmt.Errorf("--idle-timeout %v: must be 0 (default %v) or more", l.IdleTimeout, DefaultIdleTimeout)
	case l.MaxStreams < 0:
		return l, fmt.Errorf("--max-streams %d: must be 0 (default %d) or more", l.MaxStreams, DefaultMaxStreams)
	case l.MaxInflight < 0:
		return l, fmt.Errorf("--max-inflight %d: must be 0 (default %d) or more", l.MaxInflight, DefaultMaxInflight)
	case l.MaxWait < 0:
		return l, fmt.Errorf("--max-wait %v: must be 0 (default %v) or more", l.MaxWait, DefaultMaxWait)
	case l.WaitingRoom < 0:
		return l, fmt.Errorf("--waiting-room %d: must be 0 (default %d) or more", l.WaitingRoom, DefaultWaitingRoom)
	case l.ReadTimeout < 0 || l.WriteTimeout < 0:
		return l, fmt.Errorf("read timeout %v and write timeout %v: must be 0 (default %v) or more", l.ReadTimeout, l.WriteTimeout, DefaultWriteTimeout)
	case l.ReadHeaderTimeout < 0:
		return l, fmt.Errorf("read header timeout %v: must be 0 (default %v) or more", l.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	case l.StallTimeout < 0:
		return l, fmt.Errorf("--stall-timeout %v: must be 0 (default %v) or more", l.StallTimeout, DefaultStallTimeout)
	case l.StreamBuffer < 0 || (l.StreamBuffer > 0 && l.StreamBuffer < StreamPageBytes):
		return l, fmt.Errorf("--stream-buffer %d: must be 0 (default %d) or at least one page, %d bytes", l.StreamBuffer, DefaultStreamBuffer, StreamPageBytes)
	case l.BodyMemory < 0 || 0 < l.BodyMemory && l.BodyMemory < SmallBody:
		return l, fmt.Errorf("--max-body-memory %d: must be 0 (default %d) or at least %d", l.BodyMemory, DefaultBodyMemory, SmallBody)
	}
	l.BodyMemory = cmp.Or(l.BodyMemory, DefaultBodyMemory)
	l.MaxWait = cmp.Or(l.MaxWait, DefaultMaxWait)
	l.WaitingRoom = cmp.Or(l.WaitingRoom, DefaultWaitingRoom)
	l.ReadTimeout = cmp.Or(l.ReadTimeout, DefaultReadTimeout)
	l.WriteTimeout = cmp.Or(l.WriteTimeout, DefaultWriteTimeout)
	l.ReadHeaderTimeout = cmp.Or(l.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	l.StallTimeout = cmp.Or(l.StallTimeout, DefaultStallTimeout)
	l.StreamBuffer = cmp.Or(l.StreamBuffer, DefaultStreamBuffer)
	if l.IdleTimeout == 0 {
		l.IdleTimeout = DefaultIdleTimeout
	}
	if l.MaxStreams == 0 {
		l.MaxStreams = DefaultMaxStreams
	}
	if l.MaxInflight == 0 {
		l.MaxInflight = DefaultMaxInflight
	}
	nofile, err := fileLimit()
	if err != nil {
		return l, err
	}
	l.MaxConns, err = ConnLimit(nofile, l.MaxConns)
	return l, err
}

// Server serves one handler on one listener over HTTP/1.1 and h2c, within
// Limits.
type Server struct {
	srv      *http.Server
	lim      Limits
	err      error // from Resolve: Serve returns it
	conns    *connTracker
	inflight *inflightLimiter
	streams  *Streams
	bodies   *BodyBudget
	h1       *h1Server // nil without Limits.Lean
	h2       *h2Server // nil without Limits.LeanH2 (and h1)
}

// NewServer returns a Server for h on addr. If the limits do not resolve,
// Serve returns the error; callers that want it before doing other work
// call Limits.Resolve first. reg, if not nil, receives the connection and
// in-flight metrics.
func NewServer(addr string, h http.Handler, lim Limits, reg prometheus.Registerer) *Server {
	lim, err := lim.Resolve()
	s := &Server{lim: lim, err: err}
	if err != nil {
		return s
	}
	s.bodies = NewBodyBudget(lim.BodyMemory)
	s.conns = newConnTracker(lim.MaxConns, lim.IdleTimeout, lim.ReadHeaderTimeout)
	s.conns.coalesce = !lim.StandardConns
	if lim.Lean != nil && !lim.StandardConns {
		h = newLeanDispatch(h)
	}
	s.inflight = newInflightLimiter(h, lim.MaxInflight, lim.Exempt, lim.MaxWait, lim.WaitingRoom)
	s.streams = NewStreams(lim.StallTimeout, lim.StreamBuffer)
	if lim.Lean != nil && !lim.StandardConns {
		s.h1 = newH1Server(s, lim.Lean)
		if lim.LeanH2 {
			s.h2 = newH2Server(s)
		}
	}
	if reg != nil {
		registerMetrics(reg, s.conns, s.inflight, s.bodies)
		s.streams.register(reg)
		if s.h1 != nil {
			s.h1.register(reg)
		}
		if s.h2 != nil {
			s.h2.register(reg)
		}
	}
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	s.srv = &http.Server{
		Addr:              addr,
		Handler:           collapseSlashes(lim.gate(s.inflight)),
		Protocols:         &p,
		ReadHeaderTimeout: lim.ReadHeaderTimeout,
		// For HTTP/1.1 they restart with every request on a kept-alive
		// connection; for HTTP/2 they apply per stream, so long-lived h2c
		// connections are fine. Streams and long polls lift them for
		// their own answer (OpenStream).
		ReadTimeout:  lim.ReadTimeout,
		WriteTimeout: lim.WriteTimeout,
		IdleTimeout:  lim.IdleTimeout,
		// Every request finds the server's budgets in its context.
		ConnContext: func(ctx context.Context, _ net.Conn) context.Context {
			return withBodies(withStreams(ctx, s.streams), s.bodies)
		},
		MaxHeaderBytes: MaxHeaderBytes,
		ErrorLog:       newErrorLog(),
		// HTTP/2 reports StateActive when a connection's first stream opens
		// and StateIdle when its last one closes, so h2c connections are
		// tracked (and shed when idle) like HTTP/1.1 ones.
		ConnState: s.conns.setState,
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams: lim.MaxStreams,
		},
	}
	return s
}

// Limits returns the resolved limits (MaxConns as derived).
func (s *Server) Limits() Limits { return s.lim }

// Streams returns the budget of the server's streams and long polls.
func (s *Server) Streams() *Streams { return s.streams }

// Serve accepts connections on ln until Shutdown or Close, which make it
// return http.ErrServerClosed. It closes ln.
func (s *Server) Serve(ln net.Listener) error {
	if s.err != nil {
		ln.Close()
		return s.err
	}
	if s.conns.coalesce {
		stop := make(chan struct{})
		defer close(stop)
		go s.conns.yields.sample(stop)
	}
	var l net.Listener = &limitListener{Listener: ln, t: s.conns}
	if s.h1 != nil {
		l = &h1Listener{Listener: l, h: s.h1, errs: make(chan error)}
	}
	return s.srv.Serve(l)
}

// Shutdown stops accepting, closes idle connections and those that have
// sent nothing for shutdownSilentGrace, and waits for active ones until
// ctx is done.
func (s *Server) Shutdown(ctx context.Context) error {
	if s.srv == nil {
		return nil
	}
	// net/http counts a connection that has not sent its first request as
	// idle only after 5 s, and clients hold such connections: an
	// http.Transport keeps the one it dialed for a request that went out
	// on another. Under load every graceful stop then took 5 s more, with
	// the listener already closed. Silent ones are closed here instead.
	done := make(chan struct{})
	defer close(done)
	go func() {
		tick := time.NewTicker(shutdownSilentGrace / 5)
		defer tick.Stop()
		for {
			s.conns.closeSilent(time.Now(), shutdownSilentGrace)
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	if s.h1 == nil {
		return s.srv.Shutdown(ctx)
	}
	lean := make(chan error, 2)
	go func() { lean <- s.h1.shutdown(ctx) }()
	go func() { lean <- s.h2.shutdown(ctx) }()
	return errors.Join(s.srv.Shutdown(ctx), <-lean, <-lean)
}

// Close closes the listener and every connection at once.
func (s *Server) Close() error {
	if s.srv == nil {
		return nil
	}
	if s.h1 != nil {
		s.h1.close()
	}
	if s.h2 != nil {
		s.h2.close()
	}
	return s.srv.Close()
}
