package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
)

// h2Stream is a stream's record: until it is dispatched it is all the
// stream costs (no goroutine). It holds the request, its header map and
// the body received; its writer answers from any goroutine; its context
// is cancelled when the stream ends or is reset. Fields after c are
// guarded by c.mu unless noted.
type h2Stream struct {
	c      *h2Conn
	id     uint32
	req    *http.Request // built at HEADERS; the handler's after dispatch
	ctx    context.Context
	cancel context.CancelFunc
	rw     *h2Writer // set at dispatch

	recvDone, sendDone, closed bool
	closeErr                   error
	dispatched, lean           bool
	resumed                    bool // parked, and handed its slot: runHandler runs the room's run
	sendWin                    int64
	inflow                     h2Inflow
	in                         []byte // body received, not yet read
	inErr                      error  // what Read returns once in is empty
	declLen, gotLen            int64  // Content-Length (-1: none) and bytes received
	bodyClosed, needsContinue  bool
	wake                       chan struct{}
	readTimer, writeTimer      *time.Timer
	// stallTimer ends the stream when its answer has waited for the
	// client's window this long with no progress (h2Conn.stallFor).
	stallTimer *time.Timer
	// A lean stream's match, shared with the other streams of its
	// request line (sharedMatch), for leanDispatch.
	route leanTarget
}

var errH2StreamClosed = errors.New("http2: stream closed")

// signal wakes the stream's handler if it waits (for its window, the
// body, or the stream's end).
func (st *h2Stream) signal() {
	if st.wake != nil {
		select {
		case st.wake <- struct{}{}:
		default:
		}
	}
}

// waitLocked releases c.mu until the stream is signalled.
func (st *h2Stream) waitLocked() {
	if st.wake == nil {
		st.wake = make(chan struct{}, 1)
	}
	st.c.mu.Unlock()
	<-st.wake
	st.c.mu.Lock()
}

// processHeaders opens a stream, or takes a stream's trailers
// (net/http's processHeaders).
func (c *h2Conn) processHeaders(f *http2.MetaHeadersFrame) error {
	id := f.StreamID
	if id%2 != 1 {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	if st := c.streams[id]; st != nil {
		if st.recvDone {
			return http2.StreamError{StreamID: id, Code: http2.ErrCodeStreamClosed}
		}
		return c.processTrailers(st, f)
	}
	if id <= c.maxClientID {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	c.maxClientID = id
	if c.idleTimer != nil {
		c.idleTimer.Stop()
	}
	if len(c.streams)+1 > c.lim.MaxStreams {
		if c.unacked == 0 {
			return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol}
		}
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeRefusedStream}
	}
	st := c.newStream(id, f.StreamEnded())
	if f.HasPriority() && f.Priority.StreamDep == id {
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol}
	}
	if err := c.newRequest(st, f); err != nil {
		return err
	}
	if c.lim.ReadTimeout > 0 && !st.recvDone {
		st.readTimer = time.AfterFunc(c.lim.ReadTimeout, st.onReadTimeout)
	}
	return c.route(st, f.Truncated)
}

// route dispatches a new stream: an error answer of net/http's at once,
// a lean route's once its body is complete, any other at once.
func (c *h2Conn) route(st *h2Stream, truncated bool) error {
	var handler http.Handler
	if truncated {
		handler = http.HandlerFunc(h2HeaderListTooLong)
	} else if err := h2CheckRequestHeaders(st.req.Header); err != nil {
		handler = h2BadRequest(err)
	}
	if handler == nil && c.h.s.h1 != nil && st.declLen <= leanBufSize {
		if m := c.h.s.h1.routes.sharedMatch(st.req, &c.leanMemo); m != nil {
			st.route.m = m
			st.lean = true
		}
	}
	if st.lean {
		if !st.recvDone {
			return nil // dispatched at END_STREAM (or as generic if the body outgrows leanBufSize)
		}
		return c.dispatchLean(st)
	}
	return c.schedule(st, handler)
}

func (c *h2Conn) newStream(id uint32, ended bool) *h2Stream {
	ctx, cancel := context.WithCancel(c.ctx)
	st := &h2Stream{c: c, id: id, ctx: ctx, cancel: cancel, recvDone: ended,
		sendWin: c.initSendWin, inflow: h2Inflow{avail: h2RecvWindow}, declLen: -1}
	if c.lim.WriteTimeout > 0 {
		st.writeTimer = time.AfterFunc(c.lim.WriteTimeout, st.onWriteTimeout)
	}
	c.streams[id] = st
	if len(c.streams) == 1 {
		c.tc.t.setState(c.tc, http.StateActive)
	}
	return st
}

// newRequest builds the stream's Request (net/http's
// newWriterAndRequest and httpcommon.NewServerRequest).
func (c *h2Conn) newRequest(st *h2Stream, f *http2.MetaHeadersFrame) error {
	method, scheme := f.PseudoValue("method"), f.PseudoValue("scheme")
	authority, path := f.PseudoValue("authority"), f.PseudoValue("path")
	bad := http2.StreamError{StreamID: st.id, Code: http2.ErrCodeProtocol}
	if f.PseudoValue("protocol") != "" {
		return bad // extended CONNECT is off, as in net/http
	}
	isConnect := method == http.MethodConnect
	if isConnect && (path != "" || scheme != "" || authority == "") ||
		!isConnect && (method == "" || path == "" || scheme != "https" && scheme != "http") {
		return bad
	}
	hdr, trailer := c.requestHeader(st, f)
	if authority == "" {
		authority = hdr.Get("Host")
	}
	if strings.IndexByte(authority, '@') != -1 && (scheme == "http" || scheme == "https") {
		return bad
	}
	u, uri := &url.URL{Host: authority}, authority
	if !isConnect {
		var err error
		if u, err = url.ParseRequestURI(path); err != nil {
			return bad
		}
		uri = path
	}
	// Built in the connection's scratch Request, of which WithContext
	// makes the stream's: one Request allocated, not two.
	st.req = &c.scratch
	*st.req = http.Request{Method: method, URL: u, RemoteAddr: c.remote, Header: hdr, RequestURI: uri,
		Proto: "HTTP/2.0", ProtoMajor: 2, Host: authority, Body: http.NoBody, Trailer: trailer, TLS: c.tlsState}
	if !st.recvDone {
		st.openBody()
	}
	st.req = c.scratch.WithContext(st.ctx)
	c.scratch = http.Request{}
	return nil
}

// requestHeader is the request's header map (net/http's: Expect:
// 100-continue taken out, Cookie fields joined, declared trailers apart).
func (c *h2Conn) requestHeader(st *h2Stream, f *http2.MetaHeadersFrame) (http.Header, http.Header) {
	hdr := make(http.Header, len(f.Fields)-len(f.PseudoFields()))
	for _, hf := range f.RegularFields() {
		k := http.CanonicalHeaderKey(hf.Name)
		hdr[k] = append(hdr[k], hf.Value)
	}
	if httpguts.HeaderValuesContainsToken(hdr["Expect"], "100-continue") {
		delete(hdr, "Expect")
		st.needsContinue = true
	}
	if cookies := hdr["Cookie"]; len(cookies) > 1 {
		hdr["Cookie"] = []string{strings.Join(cookies, "; ")}
	}
	return hdr, h2DeclaredTrailers(hdr)
}

// openBody gives a request whose HEADERS did not end the stream its
// body and declared length (-1: none; 0 for one that does not parse).
func (st *h2Stream) openBody() {
	r := st.req
	r.ContentLength = -1
	if vv, ok := r.Header["Content-Length"]; ok {
		r.ContentLength = 0
		if cl, err := strconv.ParseUint(vv[0], 10, 63); err == nil {
			r.ContentLength = int64(cl)
		}
	}
	st.declLen = r.ContentLength
	r.Body = &h2Body{st: st}
}

func h2DeclaredTrailers(hdr http.Header) http.Header {
	var trailer http.Header
	for _, v := range hdr["Trailer"] {
		for _, key := range strings.Split(v, ",") {
			key = textproto.CanonicalMIMEHeaderKey(textproto.TrimString(key))
			switch key {
			case "Transfer-Encoding", "Trailer", "Content-Length":
			default:
				if trailer == nil {
					trailer = http.Header{}
				}
				trailer[key] = nil
			}
		}
	}
	delete(hdr, "Trailer")
	return trailer
}

// h2CheckRequestHeaders is net/http's checkValidHTTP2RequestHeaders.
func h2CheckRequestHeaders(h http.Header) error {
	for _, k := range []string{"Connection", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding", "Upgrade"} {
		if _, ok := h[k]; ok {
			return fmt.Errorf("request header %q is not valid in HTTP/2", k)
		}
	}
	te := h["Te"]
	if len(te) > 0 && (len(te) > 1 || (te[0] != "trailers" && te[0] != "")) {
		return errors.New(`request header "TE" may only be "trailers" in HTTP/2`)
	}
	return nil
}

func h2BadRequest(err error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, err.Error(), http.StatusBadRequest)
	})
}

// h2HeaderListTooLong is net/http's answer to a header list over
// SETTINGS_MAX_HEADER_LIST_SIZE.
func h2HeaderListTooLong(w http.ResponseWriter, r *http.Request) {
	w.WriteHeader(http.StatusRequestHeaderFieldsTooLarge)
	io.WriteString(w, "<h1>HTTP Error 431</h1><p>Request Header Field(s) Too Large</p>")
}

func (c *h2Conn) processTrailers(st *h2Stream, f *http2.MetaHeadersFrame) error {
	if !f.StreamEnded() || len(f.PseudoFields()) > 0 {
		return http2.StreamError{StreamID: st.id, Code: http2.ErrCodeProtocol}
	}
	for _, hf := range f.RegularFields() {
		key := http.CanonicalHeaderKey(hf.Name)
		if !httpguts.ValidTrailerHeader(key) {
			return http2.StreamError{StreamID: st.id, Code: http2.ErrCodeProtocol}
		}
		if _, ok := st.req.Trailer[key]; ok {
			st.req.Trailer[key] = append(st.req.Trailer[key], hf.Value)
		}
	}
	return c.endStreamLocked(st)
}

// processData takes a DATA frame (net/http's processData).
func (c *h2Conn) processData(f *http2.DataFrame) error {
	id, n := f.StreamID, int64(f.Length)
	st, closed := c.stream(id)
	if id == 0 || st == nil && !closed {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	if st == nil || st.recvDone {
		if err := c.refundLocked(n); err != nil {
			return err
		}
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeStreamClosed}
	}
	data := f.Data()
	if st.declLen != -1 && st.gotLen+int64(len(data)) > st.declLen {
		if err := c.refundLocked(n); err != nil {
			return err
		}
		// The handler learns it from the reset (onError), which closes
		// the stream first: woken here, it could answer before the
		// reset, which net/http never does.
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol,
			Cause: fmt.Errorf("sender tried to send more than declared Content-Length of %d bytes", st.declLen)}
	}
	if n > 0 {
		if n > c.inflow.avail || n > st.inflow.avail {
			return http2.StreamError{StreamID: id, Code: http2.ErrCodeFlowControl}
		}
		c.inflow.avail -= n
		st.inflow.avail -= n
		st.gotLen += int64(len(data))
		if st.bodyClosed {
			c.windowUpdateLocked(nil, int64(len(data)))
		} else {
			st.in = append(st.in, data...)
			st.signal()
		}
		pad := n - int64(len(data))
		c.windowUpdateLocked(nil, pad)
		c.windowUpdateLocked(st, pad)
		if st.lean && !st.dispatched && int64(len(st.in)) > leanBufSize {
			st.lean = false // too large to hold: served as it streams
			if err := c.schedule(st, nil); err != nil {
				return err
			}
		}
	}
	if f.StreamEnded() {
		return c.endStreamLocked(st)
	}
	return nil
}

// endStreamLocked notes the client's END_STREAM: the body is complete
// (or short of its Content-Length), and a lean stream is dispatched.
func (c *h2Conn) endStreamLocked(st *h2Stream) error {
	st.recvDone = true
	if st.declLen != -1 && st.declLen != st.gotLen {
		st.setBodyErr(fmt.Errorf("request declared a Content-Length of %d but only wrote %d bytes", st.declLen, st.gotLen))
	} else {
		st.setBodyErr(io.EOF)
	}
	if st.readTimer != nil {
		st.readTimer.Stop()
	}
	if st.sendDone {
		c.closeStreamLocked(st, nil)
		return nil
	}
	if st.lean && !st.dispatched {
		return c.dispatchLean(st)
	}
	return nil
}

func (st *h2Stream) setBodyErr(err error) {
	if st.inErr == nil {
		st.inErr = err
	}
	st.signal()
}

// dispatchLean serves a stream on a lean route whose whole body is in
// its record. It runs the handler as the generic path does.
func (c *h2Conn) dispatchLean(st *h2Stream) error {
	return c.schedule(st, nil)
}

// schedule starts the stream's handler, or queues it until one of the
// connection's ends: a client that resets streams whose handlers still
// run gets no more than MaxStreams handlers, and is cut past
// h2MaxEarlyResets times that many waiting (net/http's scheduleHandler).
func (c *h2Conn) schedule(st *h2Stream, handler http.Handler) error {
	st.dispatched = true
	if handler == nil {
		handler = c.h.s.srv.Handler
	}
	st.rw = &h2Writer{st: st, handler: handler}
	if c.handlers < c.lim.MaxStreams {
		c.handlers++
		c.h.run(st)
		return nil
	}
	if len(c.unstarted) > h2MaxEarlyResets*c.lim.MaxStreams {
		return http2.ConnectionError(http2.ErrCodeEnhanceYourCalm)
	}
	c.unstarted = append(c.unstarted, st)
	return nil
}

// handlerDone starts the handlers waiting for one to end.
func (c *h2Conn) handlerDone() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.handlers--
	i := 0
	for ; i < len(c.unstarted); i++ {
		st := c.unstarted[i]
		if st.closed {
			continue // reset before its handler started
		}
		if c.handlers >= c.lim.MaxStreams {
			break
		}
		c.handlers++
		c.h.run(st)
		c.unstarted[i] = nil
	}
	c.unstarted = c.unstarted[i:]
	if len(c.unstarted) == 0 {
		c.unstarted = nil
	}
}

// runHandler runs a dispatched stream's handler, on a handler
// goroutine (h2Server.run).
func (c *h2Conn) runHandler(st *h2Stream) {
	if st.resumed {
		// A parked stream handed its slot: its handler already returned
		// (and counted itself done); this runs the rest of its chain.
		st.resumed = false
		c.finishRun(st, st.rw.parking.run)
		return
	}
	defer c.handlerDone()
	c.finishRun(st, nil)
}

// finishRun runs the stream's handler, or run, the rest of a parked
// stream's chain, and ends the stream unless the handler parked it.
func (c *h2Conn) finishRun(st *h2Stream, run func()) {
	rw := st.rw
	didPanic, parked := true, false
	defer func() {
		if parked {
			return
		}
		st.cancel()
		if r := st.req; r.MultipartForm != nil {
			r.MultipartForm.RemoveAll()
		}
		if !didPanic {
			rw.handlerDone()
			return
		}
		e := recover()
		c.mu.Lock()
		c.resetLocked(st, http2.ErrCodeInternal, nil)
		c.mu.Unlock()
		c.kick(true)
		if e != nil && e != http.ErrAbortHandler {
			buf := make([]byte, panicStackBytes)
			buf = buf[:runtime.Stack(buf, false)]
			c.h.logf("http2: panic serving %v: %v\n%s", c.remote, e, buf)
		}
	}()
	if run == nil {
		c.h.served.at(c.tc.stripe).Add(1)
		st.route.req = st.req
		rw.handler.ServeHTTP(rw, st.req)
		if run, parked = rw.returnParked(); parked {
			didPanic = false
			return
		}
	}
	if run != nil {
		run()
	}
	didPanic = false
}

// resetLocked sends RST_STREAM and closes the stream.
func (c *h2Conn) resetLocked(st *h2Stream, code http2.ErrCode, cause error) {
	if st.closed {
		return
	}
	c.fw.WriteRSTStream(st.id, code)
	c.noteControlLocked()
	err := error(http2.StreamError{StreamID: st.id, Code: code, Cause: cause})
	if cause != nil {
		err = cause
	}
	c.closeStreamLocked(st, err)
}

// closeStreamLocked ends a stream: its record leaves the connection, its
// context is cancelled and its handler, if it waits, is woken.
func (c *h2Conn) closeStreamLocked(st *h2Stream, err error) {
	if st.closed {
		return
	}
	st.closed = true
	if err == nil {
		err = errH2StreamClosed
	}
	st.closeErr = err
	if st.readTimer != nil {
		st.readTimer.Stop()
	}
	if st.writeTimer != nil {
		st.writeTimer.Stop()
	}
	if st.stallTimer != nil {
		st.stallTimer.Stop()
	}
	delete(c.streams, st.id)
	if len(st.in) > 0 {
		c.windowUpdateLocked(nil, int64(len(st.in)))
		st.in = nil
	}
	st.setBodyErr(err)
	st.cancel()
	if len(c.streams) == 0 && c.werr == nil {
		c.tc.t.setState(c.tc, http.StateIdle)
		if c.idleTimer != nil {
			c.idleTimer.Reset(c.lim.IdleTimeout)
		}
		if c.inGoAway {
			c.ending = true
		}
	}
}

// sentEndLocked notes that the stream's answer is complete.
func (c *h2Conn) sentEndLocked(st *h2Stream) {
	st.sendDone = true
	if st.recvDone {
		c.closeStreamLocked(st, nil)
		return
	}
	// The client still sends a body no one will read: RST_STREAM
	// NO_ERROR asks it to stop, as net/http does.
	c.resetLocked(st, http2.ErrCodeNo, nil)
}

func (st *h2Stream) onReadTimeout() {
	c := st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if st.closed {
		return
	}
	st.setBodyErr(fmt.Errorf("%w", os.ErrDeadlineExceeded))
	if st.lean && !st.dispatched {
		// Its body will not complete: the handler reads what came and
		// the timeout, as net/http's would.
		if err := c.schedule(st, nil); err != nil {
			c.resetLocked(st, http2.ErrCodeInternal, nil)
		}
	}
}

func (st *h2Stream) onWriteTimeout() {
	c := st.c
	c.mu.Lock()
	c.resetLocked(st, http2.ErrCodeInternal, os.ErrDeadlineExceeded)
	c.mu.Unlock()
	c.kick(false)
}

// h2Body is a generic stream's request body: it reads what the client
// sent, returning flow-control credit as it goes.
type h2Body struct{ st *h2Stream }

var errH2BodyClosed = errors.New("body closed by handler")

func (b *h2Body) Read(p []byte) (int, error) {
	st := b.st
	c := st.c
	c.mu.Lock()
	if st.needsContinue {
		st.needsContinue = false
		if len(st.in) == 0 && st.inErr == nil {
			c.writeContinueLocked(st)
		}
	}
	for len(st.in) == 0 && st.inErr == nil {
		c.mu.Unlock()
		c.kick(true)
		c.mu.Lock()
		if len(st.in) == 0 && st.inErr == nil {
			st.waitLocked()
		}
	}
	if len(st.in) == 0 {
		err := st.inErr
		c.mu.Unlock()
		return 0, err
	}
	n := copy(p, st.in)
	st.in = st.in[n:]
	var err error
	if len(st.in) == 0 {
		st.in = nil
		if st.recvDone {
			// The body's end with its last bytes, as net/http's
			// HTTP/1.1 body does: the handler need not lock c.mu
			// again only to learn it.
			err = st.inErr
		}
	}
	c.windowUpdateLocked(nil, int64(n))
	if !st.recvDone && !st.closed {
		c.windowUpdateLocked(st, int64(n))
	}
	write := c.claimWriterLocked()
	c.mu.Unlock()
	if write {
		c.writeLoop()
	}
	return n, err
}

func (b *h2Body) Close() error {
	st := b.st
	c := st.c
	c.mu.Lock()
	st.needsContinue = false
	if !st.bodyClosed {
		st.bodyClosed = true
		c.windowUpdateLocked(nil, int64(len(st.in)))
		st.in = nil
		st.setBodyErr(errH2BodyClosed)
	}
	c.mu.Unlock()
	c.kick(true)
	return nil
}
