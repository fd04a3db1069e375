package api

import (
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Writing. Frames are encoded, under the connection's mutex, into one
// pending buffer, and one writer at a time takes the buffer to the
// socket: the first handler (or, for the reader's frames, a goroutine of
// its own) that finds no writer at work. Before it writes, the writer
// yields once (writeyield.go) so that the answers of handlers finishing
// together join the write; it writes to the socket directly, not through
// trackedConn.Write, which would yield a second time.

// kick starts a writer if frames wait and none is at work: inline runs
// it on the caller's goroutine (a handler's, which may block on the
// socket), otherwise on a new one (the reader's, which must read on).
func (c *h2Conn) kick(inline bool) {
	c.mu.Lock()
	write := c.claimWriterLocked()
	c.mu.Unlock()
	if !write {
		return
	}
	if inline {
		c.writeLoop()
	} else {
		go c.writeLoop()
	}
}

// claimWriterLocked reports whether frames wait and no writer is at
// work, and if so makes the caller the writer: it must run writeLoop.
func (c *h2Conn) claimWriterLocked() bool {
	if c.writing || (len(c.pend.b) == 0 && !c.ending) {
		return false
	}
	c.writing = true
	return true
}

func (c *h2Conn) writeLoop() {
	if c.tc.t.coalesce {
		c.tc.t.yields.yield()
	}
	for {
		c.mu.Lock()
		if len(c.pend.b) == 0 || c.werr != nil {
			c.pend.b = c.pend.b[:0]
			c.writing, c.queuedControl = false, 0
			c.wakeBlockedLocked()
			if c.wdone != nil {
				close(c.wdone)
				c.wdone = nil
			}
			end := c.ending && c.linger == nil
			if end {
				c.linger = time.AfterFunc(h2GoAwayLinger, func() { c.tc.Close() })
			}
			c.mu.Unlock()
			if end {
				// The GOAWAY is out: a FIN now, the close once the client
				// has read it (it closes) or after the linger.
				c.closeWrite()
			}
			return
		}
		buf := c.pend.b
		c.pend.b, c.spare = c.spare[:0], nil
		c.wakeBlockedLocked()
		c.mu.Unlock()
		_, err := c.writeSocket(buf)
		c.mu.Lock()
		if cap(buf) <= h2MaxPending {
			c.spare = buf[:0]
		}
		if err != nil && c.werr == nil {
			c.werr = err
			c.tc.Close() // the reader ends, and with it every stream
		}
		c.mu.Unlock()
	}
}

// noteControlLocked counts a control frame queued; a client that has
// them queue past h2MaxQueuedControl while not reading is cut.
func (c *h2Conn) noteControlLocked() {
	if !c.writing {
		return
	}
	c.queuedControl++
	if c.queuedControl > h2MaxQueuedControl && c.werr == nil {
		c.h.logf("http2: too many control frames in send queue, closing connection")
		c.werr = errH2ConnClosed
		c.tc.Close()
	}
}

// wakeBlockedLocked wakes the handlers waiting for the connection's
// send window or for the pending buffer to drain.
func (c *h2Conn) wakeBlockedLocked() {
	for _, st := range c.blocked {
		st.signal()
	}
	c.blocked = c.blocked[:0]
}

// writeContinueLocked answers Expect: 100-continue at the body's first
// read.
func (c *h2Conn) writeContinueLocked(st *h2Stream) {
	c.writeHeadersLocked(st, h2Headers{status: http.StatusContinue})
}

// h2Headers is a HEADERS frame to write (net/http's writeResHeaders).
type h2Headers struct {
	status            int // 0 for trailers
	h                 http.Header
	trailers          []string // keys of h to send, as trailers
	ctype, clen, date string
	endStream         bool
}

// writeHeadersLocked encodes and queues a HEADERS frame (and its
// CONTINUATIONs).
func (c *h2Conn) writeHeadersLocked(st *h2Stream, hh h2Headers) error {
	if st.closed || st.sendDone {
		return st.writeErr()
	}
	c.hbuf.Reset()
	if hh.status != 0 {
		c.encKV(":status", strconv.Itoa(hh.status))
	}
	keys := hh.trailers
	if hh.status != 0 {
		keys = make([]string, 0, len(hh.h))
		for k := range hh.h {
			keys = append(keys, k)
		}
		slices.Sort(keys)
	}
	c.encodeHeaders(hh.h, keys)
	if hh.ctype != "" {
		c.encKV("content-type", hh.ctype)
	}
	if hh.clen != "" {
		c.encKV("content-length", hh.clen)
	}
	if hh.date != "" {
		c.encKV("date", hh.date)
	}
	block := c.hbuf.Bytes()
	first := true
	for first || len(block) > 0 {
		frag := block[:min(len(block), c.peerMaxFrame)]
		block = block[len(frag):]
		if first {
			c.fw.WriteHeaders(http2.HeadersFrameParam{StreamID: st.id, BlockFragment: frag, EndStream: hh.endStream, EndHeaders: len(block) == 0})
		} else {
			c.fw.WriteContinuation(st.id, len(block) == 0, frag)
		}
		first = false
	}
	if hh.endStream {
		c.sentEndLocked(st)
	}
	return nil
}

func (c *h2Conn) encKV(k, v string) {
	c.henc.WriteField(hpack.HeaderField{Name: k, Value: v})
}

// encodeHeaders is net/http's: lower-case names, invalid names and
// values left out, Transfer-Encoding only as "trailers".
func (c *h2Conn) encodeHeaders(h http.Header, keys []string) {
	for _, k := range keys {
		vv := h[k]
		lk, ascii := h2LowerHeader(k)
		if !ascii || !h2ValidWireName(lk) {
			continue
		}
		isTE := lk == "transfer-encoding"
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) || isTE && v != "trailers" {
				continue
			}
			c.encKV(lk, v)
		}
	}
}

func h2LowerHeader(k string) (string, bool) {
	for i := 0; i < len(k); i++ {
		if k[i] >= 0x80 {
			return "", false
		}
	}
	return strings.ToLower(k), true
}

func h2ValidWireName(v string) bool {
	if len(v) == 0 {
		return false
	}
	for _, r := range v {
		if !httpguts.IsTokenRune(r) || 'A' <= r && r <= 'Z' {
			return false
		}
	}
	return true
}

func (st *h2Stream) writeErr() error {
	if st.closeErr != nil && !errors.Is(st.closeErr, errH2StreamClosed) {
		return st.closeErr
	}
	return errH2StreamClosed
}

// writeData queues p as DATA frames within the stream's and the
// connection's send windows, waiting for them, and for the socket when
// h2MaxPending bytes already wait; the stream's end (a reset, its write
// timeout, the connection's close) ends the wait.
func (c *h2Conn) writeData(st *h2Stream, p []byte, end bool) error {
	c.mu.Lock()
	for {
		if st.closed || st.sendDone {
			c.mu.Unlock()
			return st.writeErr()
		}
		if c.werr != nil {
			c.mu.Unlock()
			return c.werr
		}
		n := min(int64(len(p)), st.sendWin, c.sendWin, int64(c.peerMaxFrame))
		if c.mustWaitLocked(n, len(p)) {
			// What is queued may be what the client waits for.
			c.mu.Unlock()
			c.kick(true)
			c.mu.Lock()
			if !st.closed && c.werr == nil && c.mustWaitLocked(min(st.sendWin, c.sendWin), len(p)) {
				if w := st.rw; w != nil && w.slot != nil && w.slotState == slotHeld {
					// The rest is up to the client: the slot goes back
					// first (its release may hand it to a stream of this
					// connection, so not under c.mu).
					c.mu.Unlock()
					w.lendSlot(len(p))
					c.mu.Lock()
					continue
				}
				if len(c.pend.b) >= h2MaxPending || c.sendWin <= 0 {
					c.blocked = append(c.blocked, st) // woken by the drain or the connection's window
				}
				stalled := c.armStallLocked(st)
				st.waitLocked()
				if stalled {
					st.stallTimer.Stop()
				}
			}
			continue
		}
		n = max(n, 0)
		last := end && n == int64(len(p))
		c.fw.WriteData(st.id, last, p[:n])
		st.sendWin -= n
		c.sendWin -= n
		p = p[n:]
		if last {
			c.sentEndLocked(st)
		}
		if len(p) == 0 {
			break
		}
	}
	write := c.claimWriterLocked()
	c.mu.Unlock()
	if write {
		c.writeLoop()
	}
	return nil
}

// keptStall is how long an answer that kept its slot (its lending was
// refused: the server already holds --max-inflight such handlers or
// maxLentBytes of their answers) may wait for its client with no
// progress. A client that reads sends WINDOW_UPDATEs as it goes; one that
// makes none for a second while the server is that full loses the
// stream, so that clients that do not read cannot hold the slots and the
// memory of the rest for the write timeout.
const keptStall = time.Second

// armStallLocked starts the stream's stall timer for a wait for its
// client (--stall-timeout, or keptStall for a handler that kept its
// slot); false if it has none.
func (c *h2Conn) armStallLocked(st *h2Stream) bool {
	d := c.lim.StallTimeout
	if w := st.rw; w != nil && w.slot != nil && w.slotState == slotKept {
		d = min(d, keptStall)
	}
	if d <= 0 {
		return false
	}
	if st.stallTimer == nil {
		st.stallTimer = time.AfterFunc(d, st.onWriteTimeout)
	} else {
		st.stallTimer.Reset(d)
	}
	return true
}

// queueLastLocked queues p as the stream's last DATA frame if it fits
// the send windows, one frame and the pending buffer now; otherwise
// writeData is the way.
func (c *h2Conn) queueLastLocked(st *h2Stream, p []byte) bool {
	n := int64(len(p))
	if st.closed || st.sendDone || c.werr != nil || len(c.pend.b) >= h2MaxPending ||
		n > min(st.sendWin, c.sendWin, int64(c.peerMaxFrame)) {
		return false
	}
	c.fw.WriteData(st.id, true, p)
	st.sendWin -= n
	c.sendWin -= n
	c.sentEndLocked(st)
	return true
}

// mustWaitLocked: DATA of n bytes (of want) cannot be queued now, for
// the send windows or a full pending buffer. An empty frame (the end)
// needs no window.
func (c *h2Conn) mustWaitLocked(n int64, want int) bool {
	return len(c.pend.b) >= h2MaxPending || n <= 0 && want > 0
}

// h2Writer is a stream's http.ResponseWriter, net/http's
// responseWriterState: the handler's answer, buffered up to
// h2HandlerChunk, then sent as it grows or is flushed. It also has the
// methods http.ResponseController looks for.
type h2Writer struct {
	st      *h2Stream
	handler http.Handler

	header, snap      http.Header
	status            int
	wroteHeader, sent bool
	done              bool
	buf               []byte
	wrote, sentLen    int64
	trailers          []string
	parking           h2Parking
	// slot is the in-flight slot its handler holds (holdSlot), and
	// slotState whether it was lent while the handler waits for its
	// client (lendSlot); the handler's goroutine alone reads and writes
	// them.
	slot      *inflightLimiter
	slotState uint8
	lentBytes int64
}

const (
	slotHeld = iota
	slotLent // given back while the answer waits for the client
	slotKept // lending was refused: freed when the handler returns
)

func (w *h2Writer) holdSlot(l *inflightLimiter) { w.slot, w.slotState = l, slotHeld }

// returnSlot gives the slot back at once (slotReturner): the request
// waits for a turn, which bounds it from then on.
func (w *h2Writer) returnSlot() {
	if w.slot != nil && w.slotState == slotHeld {
		w.slot.release()
		w.slot = nil
	}
}

func (w *h2Writer) dropSlot() {
	l := w.slot
	w.slot = nil
	if l == nil {
		return
	}
	if w.slotState == slotLent {
		l.returnLent(w.lentBytes)
		return
	}
	l.release()
}

// lendSlot gives the handler's slot back, once, as its answer starts to
// wait for the client's window with n bytes left to write
// (inflightLimiter.lend).
func (w *h2Writer) lendSlot(n int) {
	if w.slot == nil || w.slotState != slotHeld {
		return
	}
	w.slotState = slotKept
	if w.slot.lend(int64(n)) {
		w.slotState, w.lentBytes = slotLent, int64(n)
	}
}

func (w *h2Writer) stripe() uint32 { return w.st.c.tc.stripe }

func (w *h2Writer) Header() http.Header {
	if w.header == nil {
		w.header = http.Header{}
	}
	return w.header
}

func (w *h2Writer) WriteHeader(code int) {
	if w.wroteHeader {
		return
	}
	if code < 100 || code > 999 {
		panic("invalid WriteHeader code " + strconv.Itoa(code))
	}
	if code < 200 {
		h := w.header
		_, cl := h["Content-Length"]
		_, te := h["Transfer-Encoding"]
		if cl || te {
			h = h.Clone()
			h.Del("Content-Length")
			h.Del("Transfer-Encoding")
		}
		c := w.st.c
		c.mu.Lock()
		c.writeHeadersLocked(w.st, h2Headers{status: code, h: h})
		c.mu.Unlock()
		c.kick(true)
		return
	}
	w.wroteHeader, w.status = true, code
	if len(w.header) > 0 {
		w.snap = w.header.Clone()
	}
}

func (w *h2Writer) Write(p []byte) (int, error) { return w.write(p) }

func (w *h2Writer) WriteString(s string) (int, error) { return w.write([]byte(s)) }

func (w *h2Writer) write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !bodyAllowed(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	w.wrote += int64(len(p))
	if w.sentLen != 0 && w.wrote > w.sentLen {
		return 0, errors.New("http2: handler wrote more than declared Content-Length")
	}
	n := len(p)
	for len(p) > h2HandlerChunk-len(w.buf) {
		if len(w.buf) == 0 {
			_, err := w.writeChunk(p)
			return n - len(p), err
		}
		k := h2HandlerChunk - len(w.buf)
		w.buf = append(w.buf, p[:k]...)
		p = p[k:]
		if _, err := w.writeChunk(w.buf); err != nil {
			return n - len(p) - k, err
		}
		w.buf = w.buf[:0]
	}
	w.buf = append(w.buf, p...)
	return n, nil
}

// writeChunk sends the header if not yet sent, then p (net/http's
// writeChunk, whose header rules it keeps).
func (w *h2Writer) writeChunk(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.done {
		w.promoteTrailers()
	}
	c := w.st.c
	isHead := w.st.req.Method == http.MethodHead
	if !w.sent {
		w.sent = true
		hh := w.startHeaders(p, isHead)
		c.mu.Lock()
		err := c.writeHeadersLocked(w.st, hh)
		if err == nil && !hh.endStream && w.done && len(p) > 0 && !w.hasNonemptyTrailers() && c.queueLastLocked(w.st, p) {
			// The whole answer in one critical section: the
			// connection's reader and its other handlers wait on c.mu.
			write := c.claimWriterLocked()
			c.mu.Unlock()
			if write {
				c.writeLoop()
			}
			return len(p), nil
		}
		c.mu.Unlock()
		if err != nil {
			return 0, err
		}
		if hh.endStream {
			c.kick(true)
			return 0, nil
		}
	}
	if isHead {
		return len(p), nil
	}
	if len(p) == 0 && !w.done {
		c.kick(true)
		return 0, nil
	}
	withTrailers := w.hasNonemptyTrailers()
	end := w.done && !withTrailers
	if len(p) > 0 || end {
		if err := c.writeData(w.st, p, end); err != nil {
			return 0, err
		}
	}
	if w.done && withTrailers {
		c.mu.Lock()
		err := c.writeHeadersLocked(w.st, h2Headers{h: w.header, trailers: w.trailers, endStream: true})
		c.mu.Unlock()
		c.kick(true)
		return len(p), err
	}
	return len(p), nil
}

// startHeaders is the answer's HEADERS frame.
func (w *h2Writer) startHeaders(p []byte, isHead bool) h2Headers {
	hh := h2Headers{status: w.status, h: w.snap}
	if hh.clen = get(w.snap, "Content-Length"); hh.clen != "" {
		w.snap.Del("Content-Length")
		if cl, err := strconv.ParseUint(hh.clen, 10, 63); err == nil {
			w.sentLen = int64(cl)
		} else {
			hh.clen = ""
		}
	}
	_, hasCL := w.snap["Content-Length"]
	if !hasCL && hh.clen == "" && w.done && bodyAllowed(w.status) && (len(p) > 0 || !isHead) {
		hh.clen = strconv.Itoa(len(p))
	}
	_, hasCT := w.snap["Content-Type"]
	if w.snap.Get("Content-Encoding") == "" && !hasCT && bodyAllowed(w.status) && len(p) > 0 {
		hh.ctype = http.DetectContentType(p)
	}
	if _, ok := w.snap["Date"]; !ok {
		hh.date = time.Now().UTC().Format(http.TimeFormat)
	}
	for _, v := range w.snap["Trailer"] {
		for _, k := range strings.Split(v, ",") {
			w.declareTrailer(strings.TrimSpace(k))
		}
	}
	if _, ok := w.snap["Connection"]; ok {
		v := get(w.snap, "Connection")
		delete(w.snap, "Connection")
		if v == "close" {
			w.st.c.startGracefulShutdown()
		}
	}
	hh.endStream = (w.done && len(w.trailers) == 0 && len(p) == 0) || isHead
	return hh
}

func (w *h2Writer) declareTrailer(k string) {
	k = http.CanonicalHeaderKey(k)
	if k == "" || !httpguts.ValidTrailerHeader(k) {
		return
	}
	if !slices.Contains(w.trailers, k) {
		w.trailers = append(w.trailers, k)
	}
}

// promoteTrailers makes "Trailer:"-prefixed header keys trailers.
func (w *h2Writer) promoteTrailers() {
	for k, vv := range w.header {
		if !strings.HasPrefix(k, http.TrailerPrefix) {
			continue
		}
		tk := strings.TrimPrefix(k, http.TrailerPrefix)
		w.declareTrailer(tk)
		w.header[http.CanonicalHeaderKey(tk)] = vv
	}
	slices.Sort(w.trailers)
}

func (w *h2Writer) hasNonemptyTrailers() bool {
	for _, k := range w.trailers {
		if len(w.header[k]) > 0 {
			return true
		}
	}
	return false
}

func (w *h2Writer) Flush() { w.FlushError() }

func (w *h2Writer) FlushError() error {
	if len(w.buf) > 0 {
		_, err := w.writeChunk(w.buf)
		w.buf = w.buf[:0]
		return err
	}
	_, err := w.writeChunk(nil)
	if err == nil {
		c := w.st.c
		c.mu.Lock()
		if w.st.closed && !w.st.sendDone {
			err = w.st.writeErr()
		}
		c.mu.Unlock()
	}
	return err
}

// handlerDone sends what the handler left: the header, the buffered
// body, the trailers, END_STREAM.
func (w *h2Writer) handlerDone() {
	w.done = true
	// Flush's work without its check of the stream's state afterwards
	// (one more lock of c.mu): nobody reads the error now.
	w.writeChunk(w.buf)
	w.buf = nil
}

// EnableFullDuplex: an HTTP/2 stream always is.
func (w *h2Writer) EnableFullDuplex() error { return nil }

func (w *h2Writer) SetReadDeadline(d time.Time) error {
	return w.st.setDeadline(&w.st.readTimer, d, w.st.onReadTimeout)
}

func (w *h2Writer) SetWriteDeadline(d time.Time) error {
	return w.st.setDeadline(&w.st.writeTimer, d, w.st.onWriteTimeout)
}

// setDeadline moves one of the stream's timers, as net/http's stream
// does: a deadline past ends at once, zero lifts it.
func (st *h2Stream) setDeadline(t **time.Timer, d time.Time, fire func()) error {
	if !d.IsZero() && d.Before(time.Now()) {
		fire()
		return nil
	}
	c := st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if st.closed {
		return nil
	}
	if *t != nil && !(*t).Stop() {
		return nil // it fired already
	}
	switch {
	case d.IsZero():
		*t = nil
	case *t == nil:
		*t = time.AfterFunc(time.Until(d), fire)
	default:
		(*t).Reset(time.Until(d))
	}
	return nil
}
