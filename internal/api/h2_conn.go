package api

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"math"
	"net/http"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2Conn is one connection on the lean HTTP/2 server, h2c or over TLS.
// One goroutine (serve) reads and processes frames; handlers and timers
// change the connection's state under mu, which also guards the frames
// encoded and not yet written (h2_writer.go).
type h2Conn struct {
	h      *h2Server
	shard  *h2Shard     // where its streams' handlers are taken from (h2_workers.go)
	tc     *trackedConn // the socket: tracker states, deadlines, close
	ctx    context.Context
	remote string
	fr     *http2.Framer // reads; serve's only
	rd     *h2Reader
	// scratch is where the reader builds a stream's Request (h2_stream.go).
	scratch http.Request
	// leanMemo is the reader's (serve's) memo of which routes are lean.
	leanMemo leanMemo
	lim      *Limits
	// tls, under TLS (ALPN "h2"), is the TLS connection over tc that
	// frames are read from and written to (h2_tls.go), and tlsState its
	// state, every request's TLS; both nil for h2c.
	tls      *tls.Conn
	tlsState *tls.ConnectionState

	mu sync.Mutex
	// Writing (h2_writer.go).
	fw            *http2.Framer // encodes into pend
	pend          h2Pending
	spare         []byte
	writing       bool
	werr          error
	henc          *hpack.Encoder
	hbuf          bytes.Buffer
	queuedControl int
	blocked       []*h2Stream   // handlers waiting for the connection's window or the socket
	ending        bool          // close the write side once pend is written
	wdone         chan struct{} // closed when the writer at work stops (awaitWrites)
	// Streams and flow control.
	streams      map[uint32]*h2Stream
	maxClientID  uint32
	handlers     int
	unstarted    []*h2Stream
	sendWin      int64 // the connection's send window
	initSendWin  int64 // the peer's SETTINGS_INITIAL_WINDOW_SIZE
	peerMaxFrame int
	inflow       h2Inflow
	unacked      int // our SETTINGS frames not yet acknowledged
	sawSettings  bool
	inGoAway     bool
	goAwayCode   http2.ErrCode
	idleTimer    *time.Timer
	linger       *time.Timer
}

// h2Pending collects encoded frames; the write Framer writes into it.
type h2Pending struct{ b []byte }

func (p *h2Pending) Write(b []byte) (int, error) {
	p.b = append(p.b, b...)
	return len(b), nil
}

// h2Reader gives the Framer the bytes the HTTP/1.1 loop read, then the
// connection's (src: the trackedConn, or the TLS connection over it).
type h2Reader struct {
	pre []byte
	src io.Reader
}

func (r *h2Reader) Read(p []byte) (int, error) {
	if len(r.pre) > 0 {
		n := copy(p, r.pre)
		r.pre = r.pre[n:]
		return n, nil
	}
	return r.src.Read(p)
}

// h2Inflow is a receive window and the credit not yet returned
// (net/http's inflow).
type h2Inflow struct{ avail, unsent int64 }

// take reports whether n bytes fit the window, and takes them.
func (f *h2Inflow) take(n int64) bool {
	if n > f.avail {
		return false
	}
	f.avail -= n
	return true
}

// add returns n bytes of credit and says how many to announce now.
func (f *h2Inflow) add(n int64) int64 {
	f.unsent += n
	if f.unsent < h2InflowMinRefresh && f.unsent < f.avail {
		return 0
	}
	send := f.unsent
	f.avail += send
	f.unsent = 0
	return send
}

func newH2Conn(h *h2Server, tc *trackedConn, read []byte) *h2Conn {
	c := &h2Conn{h: h, shard: h.pool.shard(h.nconn.Add(1)), tc: tc, lim: &h.s.lim, streams: map[uint32]*h2Stream{},
		sendWin: 65535, initSendWin: 65535, peerMaxFrame: 16384,
		inflow: h2Inflow{avail: 65535}}
	c.ctx = h.s.connContext(tc)
	c.remote = tc.RemoteAddr().String()
	c.rd = &h2Reader{pre: read, src: tc}
	c.fr = http2.NewFramer(nil, c.rd)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(h2HeaderTableSize, nil)
	c.fr.MaxHeaderListSize = h2MaxHeaderListSize()
	c.fr.SetMaxReadFrameSize(h2MaxReadFrameSize)
	c.fr.SetReuseFrames()
	c.fw = http2.NewFramer(&c.pend, nil)
	c.henc = hpack.NewEncoder(&c.hbuf)
	return c
}

// h2MaxHeaderListSize is net/http's SETTINGS_MAX_HEADER_LIST_SIZE for
// MaxHeaderBytes: padded for HTTP/2's 32 bytes per field, 10 fields.
func h2MaxHeaderListSize() uint32 { return MaxHeaderBytes + 10*32 }

// serve runs the connection until it ends.
func (c *h2Conn) serve() {
	defer c.closeAll()
	defer c.awaitWrites() // a GOAWAY or an answer still queued goes out first
	c.mu.Lock()
	c.fw.WriteSettings(
		http2.Setting{ID: http2.SettingMaxFrameSize, Val: h2MaxReadFrameSize},
		http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: uint32(c.lim.MaxStreams)},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: h2MaxHeaderListSize()},
		http2.Setting{ID: http2.SettingHeaderTableSize, Val: h2HeaderTableSize},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: h2RecvWindow},
	)
	c.unacked++
	c.fw.WriteWindowUpdate(0, uint32(h2RecvWindow-c.inflow.avail))
	c.inflow.avail = h2RecvWindow
	c.mu.Unlock()
	c.kick(false)
	if !c.readPreface() {
		return
	}
	// As net/http: out of StateNew, and idle until a stream opens.
	c.tc.t.setState(c.tc, http.StateActive)
	c.tc.t.setState(c.tc, http.StateIdle)
	c.mu.Lock()
	c.idleTimer = time.AfterFunc(c.lim.IdleTimeout, c.onIdle)
	c.mu.Unlock()
	for {
		f, err := c.fr.ReadFrame()
		if err == nil {
			err = c.process(f)
		}
		if err == nil {
			continue
		}
		// Only an error, in onError, ends the connection with a
		// GOAWAY other than NO_ERROR: checking for it after every
		// frame was one more lock of c.mu per frame.
		if !c.onError(err) {
			return
		}
		if c.failed() {
			// The GOAWAY goes out, then a FIN, and the connection
			// closes once the client has read them (h2GoAwayLinger);
			// what it sends meanwhile is read and dropped, since a
			// close with it unread would reset the connection.
			io.Copy(io.Discard, c.rd)
			return
		}
	}
}

// readPreface reads the rest of the client's preface within the header
// timeout.
func (c *h2Conn) readPreface() bool {
	var p [len(h2cPreface)]byte
	c.tc.SetReadDeadline(time.Now().Add(c.lim.ReadHeaderTimeout))
	if _, err := io.ReadFull(c.rd, p[:]); err != nil || string(p[:]) != h2cPreface {
		return false
	}
	c.tc.SetReadDeadline(time.Time{})
	return true
}

// onError handles an error reading or processing a frame; it returns
// whether to read on.
func (c *h2Conn) onError(err error) bool {
	var se http2.StreamError
	var ce http2.ConnectionError
	switch {
	case errors.As(err, &se):
		c.mu.Lock()
		if st := c.streams[se.StreamID]; st != nil {
			c.resetLocked(st, se.Code, se.Cause)
		} else {
			c.fw.WriteRSTStream(se.StreamID, se.Code)
			c.noteControlLocked()
		}
		c.mu.Unlock()
		c.kick(false)
		return true
	case errors.As(err, &ce):
		c.fatal(http2.ErrCode(ce))
		return true
	case errors.Is(err, http2.ErrFrameTooLarge):
		c.fatal(http2.ErrCodeFrameSize)
		return true
	}
	return false // the connection closed or failed
}

// failed reports whether the connection sent GOAWAY for an error.
func (c *h2Conn) failed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inGoAway && c.goAwayCode != http2.ErrCodeNo
}

// awaitWrites waits until the frames queued are written (or the socket
// failed, within the write timeout).
func (c *h2Conn) awaitWrites() {
	c.kick(true)
	c.mu.Lock()
	if !c.writing {
		c.mu.Unlock()
		return
	}
	if c.wdone == nil {
		c.wdone = make(chan struct{})
	}
	done := c.wdone
	c.mu.Unlock()
	<-done
}

// fatal answers a connection error: GOAWAY with its code, then the
// connection's end.
func (c *h2Conn) fatal(code http2.ErrCode) {
	c.mu.Lock()
	c.goAwayLocked(code)
	c.mu.Unlock()
	c.kick(false)
}

// process handles one frame (net/http's processFrame).
func (c *h2Conn) process(f http2.Frame) error {
	// One critical section per frame: the handlers of the connection's
	// streams take c.mu too, and on many cores every extra lock is one
	// more wait behind them.
	c.mu.Lock()
	err := c.processLocked(f)
	write := c.claimWriterLocked()
	c.mu.Unlock()
	if write {
		go c.writeLoop() // the reader reads on
	}
	return err
}

func (c *h2Conn) processLocked(f http2.Frame) error {
	if !c.sawSettings {
		if _, ok := f.(*http2.SettingsFrame); !ok {
			return http2.ConnectionError(http2.ErrCodeProtocol)
		}
		c.sawSettings = true
	}
	if c.inGoAway && (c.goAwayCode != http2.ErrCodeNo || f.Header().StreamID > c.maxClientID) {
		if d, ok := f.(*http2.DataFrame); ok {
			return c.refundLocked(int64(d.Length))
		}
		return nil
	}
	switch f := f.(type) {
	case *http2.SettingsFrame:
		return c.processSettings(f)
	case *http2.MetaHeadersFrame:
		return c.processHeaders(f)
	case *http2.WindowUpdateFrame:
		return c.processWindowUpdate(f)
	case *http2.PingFrame:
		if !f.IsAck() {
			c.fw.WritePing(true, f.Data)
			c.noteControlLocked()
		}
	case *http2.DataFrame:
		return c.processData(f)
	case *http2.RSTStreamFrame:
		return c.processReset(f)
	case *http2.PriorityFrame:
		if f.StreamDep == f.StreamID {
			return http2.StreamError{StreamID: f.StreamID, Code: http2.ErrCodeProtocol}
		}
	case *http2.GoAwayFrame:
		c.startGracefulLocked()
	case *http2.PushPromiseFrame:
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	return nil
}

// refundLocked takes n bytes of a DATA frame no stream reads from the
// connection's window and gives them back at once.
func (c *h2Conn) refundLocked(n int64) error {
	if !c.inflow.take(n) {
		return http2.ConnectionError(http2.ErrCodeFlowControl)
	}
	c.windowUpdateLocked(nil, n)
	return nil
}

// windowUpdateLocked returns n bytes of receive credit to the
// connection (st nil) or a stream.
func (c *h2Conn) windowUpdateLocked(st *h2Stream, n int64) {
	if n <= 0 {
		return
	}
	var id uint32
	var send int64
	if st == nil {
		send = c.inflow.add(n)
	} else {
		id, send = st.id, st.inflow.add(n)
	}
	if send > 0 {
		c.fw.WriteWindowUpdate(id, uint32(send))
		c.noteControlLocked()
	}
}

func (c *h2Conn) processSettings(f *http2.SettingsFrame) error {
	if f.IsAck() {
		c.unacked--
		if c.unacked < 0 {
			return http2.ConnectionError(http2.ErrCodeProtocol)
		}
		return nil
	}
	if f.NumSettings() > h2MaxSettings || f.HasDuplicates() {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	if err := f.ForeachSetting(c.processSetting); err != nil {
		return err
	}
	c.fw.WriteSettingsAck()
	c.noteControlLocked()
	return nil
}

func (c *h2Conn) processSetting(s http2.Setting) error {
	if err := s.Valid(); err != nil {
		return err
	}
	switch s.ID {
	case http2.SettingHeaderTableSize:
		c.henc.SetMaxDynamicTableSize(s.Val)
	case http2.SettingInitialWindowSize:
		growth := int64(s.Val) - c.initSendWin
		c.initSendWin = int64(s.Val)
		for _, st := range c.streams {
			st.sendWin += growth
			if st.sendWin > math.MaxInt32 {
				return http2.ConnectionError(http2.ErrCodeFlowControl)
			}
			st.signal()
		}
	case http2.SettingMaxFrameSize:
		c.peerMaxFrame = int(s.Val)
	}
	return nil
}

func (c *h2Conn) processWindowUpdate(f *http2.WindowUpdateFrame) error {
	if f.StreamID == 0 {
		c.sendWin += int64(f.Increment)
		if c.sendWin > math.MaxInt32 {
			return http2.ConnectionError(http2.ErrCodeFlowControl)
		}
		c.wakeBlockedLocked()
		return nil
	}
	st, closed := c.stream(f.StreamID)
	if st == nil {
		if !closed {
			return http2.ConnectionError(http2.ErrCodeProtocol)
		}
		return nil
	}
	st.sendWin += int64(f.Increment)
	if st.sendWin > math.MaxInt32 {
		return http2.StreamError{StreamID: f.StreamID, Code: http2.ErrCodeFlowControl}
	}
	st.signal()
	return nil
}

func (c *h2Conn) processReset(f *http2.RSTStreamFrame) error {
	st, closed := c.stream(f.StreamID)
	if st == nil {
		if !closed {
			return http2.ConnectionError(http2.ErrCodeProtocol)
		}
		return nil
	}
	c.closeStreamLocked(st, http2.StreamError{StreamID: f.StreamID, Code: f.ErrCode})
	return nil
}

// stream returns the open stream id, or whether id is a closed one
// (false: idle, never opened).
func (c *h2Conn) stream(id uint32) (st *h2Stream, closed bool) {
	if st := c.streams[id]; st != nil {
		return st, false
	}
	return nil, id%2 == 1 && id <= c.maxClientID
}

// onIdle ends a connection that had no stream for the idle timeout.
func (c *h2Conn) onIdle() {
	c.mu.Lock()
	if len(c.streams) == 0 {
		c.goAwayLocked(http2.ErrCodeNo)
	}
	c.mu.Unlock()
	c.kick(false)
}

// startGracefulShutdown sends GOAWAY: the streams open finish, no new
// one starts, and the connection closes once they are done.
func (c *h2Conn) startGracefulShutdown() {
	c.mu.Lock()
	c.startGracefulLocked()
	c.mu.Unlock()
	c.kick(false)
}

func (c *h2Conn) startGracefulLocked() { c.goAwayLocked(http2.ErrCodeNo) }

// goAwayLocked sends GOAWAY once; the connection ends once it is written
// and, for a graceful one, its streams are done.
func (c *h2Conn) goAwayLocked(code http2.ErrCode) {
	if c.inGoAway {
		if c.goAwayCode == http2.ErrCodeNo && code != http2.ErrCodeNo {
			c.goAwayCode = code
			c.ending = true
		}
		return
	}
	c.inGoAway, c.goAwayCode = true, code
	c.fw.WriteGoAway(c.maxClientID, code, nil)
	if code != http2.ErrCodeNo || len(c.streams) == 0 {
		c.ending = true
	}
}

// closeAll ends every stream of a connection that is done.
func (c *h2Conn) closeAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.idleTimer != nil {
		c.idleTimer.Stop()
	}
	if c.linger != nil {
		c.linger.Stop()
	}
	if c.werr == nil {
		c.werr = errH2ConnClosed
	}
	for _, st := range c.streams {
		c.closeStreamLocked(st, errH2ConnClosed)
	}
	c.unstarted = nil
	c.wakeBlockedLocked()
}

var errH2ConnClosed = errors.New("http2: client connection closed")
