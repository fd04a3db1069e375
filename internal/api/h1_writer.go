package api

import (
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
)

// h1Writer is the lean path's http.ResponseWriter: it buffers the answer
// and renders it as net/http's HTTP/1.1 server would (server.go,
// chunkWriter.writeHeader), for one write. It is not an http.Flusher nor
// an http.Hijacker, and http.ResponseController finds nothing to
// control: routes that need those are not lean.
type h1Writer struct {
	c           *h1Conn
	header      http.Header
	status      int
	wroteHeader bool
	clen        int64 // the handler's Content-Length, or -1
	body        []byte
	info        []byte // 1xx answers, written first
	// closeAfter: answer with Connection: close and close; tooLarge:
	// the body was over a route's limit (http.MaxBytesReader).
	closeAfter, tooLarge bool
	// slot is the in-flight slot the handler holds (holdSlot), kept past
	// the handler's return for a large answer; written runs once the
	// answer is written or given up (afterWritten).
	slot    *inflightLimiter
	lent    int64 // > 0: the slot was lent with these bytes to write
	written []func()
}

// largeAnswer: an answer over this many bytes is accounted for until the
// connection has written it. The lean path writes an answer after its
// handler returns, so a slot (or a turn of Turns) freed at the return
// bounded the handlers, not the answers: 1,500 connections that did not
// read their 1.6 MB event answers held 4 GB with no slot taken, whatever
// --max-inflight said. Its slot is lent as a lean HTTP/2 answer's is
// (inflightLimiter.lend: within the bytes all lent answers may hold), or
// else kept until the answer is written; whatever its handler asked to
// keep with afterWritten is kept until then too. A small answer frees
// its slot at once, as before: what it holds is small.
const largeAnswer = 64 << 10

// bufferBeforeChunking is net/http's: an answer of at most this many
// bytes, whose length the handler did not set, gets a Content-Length;
// a longer one is chunked.
const bufferBeforeChunking = 2048

func (w *h1Writer) reset() {
	clear(w.header)
	body := w.body[:0]
	if cap(body) > largeAnswer {
		body = nil // a large answer's buffer is not kept for the connection's life
	}
	*w = h1Writer{c: w.c, header: w.header, clen: -1, body: body, info: w.info[:0], written: w.written[:0]}
}

func (w *h1Writer) holdSlot(l *inflightLimiter) { w.slot = l }

// returnSlot gives the slot back at once (slotReturner): the request
// waits for a turn, which bounds it from then on.
func (w *h1Writer) returnSlot() {
	if w.slot != nil {
		w.slot.release()
		w.slot = nil
	}
}

// dropSlot frees the slot when the handler returns, unless the answer is
// large: then it is lent, or kept until the answer is written
// (answered).
func (w *h1Writer) dropSlot() {
	l := w.slot
	if l == nil {
		return
	}
	if n := int64(len(w.body)); n > largeAnswer {
		if l.lend(n) {
			w.lent = n
		}
		return
	}
	l.release()
	w.slot = nil
}

// afterWritten implements the afterWriter test Turns.Serve makes: for a
// large answer, f runs once the connection has written it (answered);
// false (f not taken) for a small one.
func (w *h1Writer) afterWritten(f func()) bool {
	if len(w.body) <= largeAnswer {
		return false
	}
	w.written = append(w.written, f)
	return true
}

// answered frees what a large answer kept until it was written, or
// given up on (a failed write, a panic). It runs once per request.
func (w *h1Writer) answered() {
	if l := w.slot; l != nil {
		if w.lent > 0 {
			l.returnLent(w.lent)
		} else {
			l.release()
		}
		w.slot, w.lent = nil, 0
	}
	for i, f := range w.written {
		f()
		w.written[i] = nil
	}
	w.written = w.written[:0]
	if cap(w.body) > largeAnswer {
		// Not kept until the next request: a connection may idle for
		// --idle-timeout, and 690 that had each got a 1.6 MB answer held
		// 1.3 GB doing so.
		w.body = nil
	}
}

func (w *h1Writer) Header() http.Header { return w.header }

func (w *h1Writer) stripe() uint32 { return w.c.tc.stripe }

func (w *h1Writer) WriteHeader(code int) {
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if w.wroteHeader {
		w.c.h.logf("http: superfluous response.WriteHeader call (lean HTTP/1.1 path)")
		return
	}
	if code < 200 && code != http.StatusSwitchingProtocols {
		w.info = appendStatusLine(w.info, code)
		w.info = appendHeader(w.info, w.header, true)
		w.info = append(w.info, "\r\n"...)
		return
	}
	w.wroteHeader, w.status = true, code
	if cl := get(w.header, "Content-Length"); cl != "" {
		if v, err := strconv.ParseInt(cl, 10, 64); err == nil && v >= 0 {
			w.clen = v
		} else {
			// net/http deletes it from the handler's map but not from the
			// copy it sends, so the answer is chunked without it.
			w.c.h.logf("http: invalid Content-Length of %q", cl)
		}
	}
}

func (w *h1Writer) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if len(p) == 0 {
		return 0, nil
	}
	if !bodyAllowed(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	if w.clen >= 0 && int64(len(w.body)+len(p)) > w.clen {
		return 0, http.ErrContentLength
	}
	w.body = append(w.body, p...)
	return len(p), nil
}

// WriteString lets io.WriteString skip a conversion, as net/http's does.
func (w *h1Writer) WriteString(s string) (int, error) {
	return w.Write([]byte(s))
}

// requestTooLarge is what net/http does when http.MaxBytesReader stops a
// body: answer with Connection: close and close (BodyError calls it).
func (w *h1Writer) requestTooLarge() {
	w.closeAfter, w.tooLarge = true, true
	if !w.wroteHeader {
		w.header.Set("Connection", "close")
	}
}

// extraHeader is what net/http adds to a handler's header, in the
// order it writes them after the handler's sorted ones.
type extraHeader struct {
	date        string
	clen        int // -1: none
	ctype, conn string
	chunked     bool
}

// render puts the whole answer in the connection's out buffer.
func (w *h1Writer) render(shutting bool) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	x := w.finalHeader(shutting)
	// Into the connection's buffer through a pointer to it: a local
	// slice whose address an interface holds would move to the heap.
	out := &w.c.out
	*out = append((*out)[:0], w.info...)
	*out = appendStatusLine(*out, w.status)
	*out = appendHeader(*out, w.header, false)
	if x.date != "" {
		*out = append(append(append(*out, "Date: "...), x.date...), "\r\n"...)
	}
	if x.clen >= 0 {
		*out = append(strconv.AppendInt(append(*out, "Content-Length: "...), int64(x.clen), 10), "\r\n"...)
	}
	if x.ctype != "" {
		*out = append(append(append(*out, "Content-Type: "...), x.ctype...), "\r\n"...)
	}
	if x.conn != "" {
		*out = append(append(append(*out, "Connection: "...), x.conn...), "\r\n"...)
	}
	if x.chunked {
		*out = append(*out, "Transfer-Encoding: chunked\r\n"...)
	}
	*out = append(*out, "\r\n"...)
	if !x.chunked {
		*out = append(*out, w.body...)
		return
	}
	if len(w.body) > 0 {
		*out = strconv.AppendInt(*out, int64(len(w.body)), 16)
		*out = append(append(append(*out, "\r\n"...), w.body...), "\r\n"...)
	}
	*out = append(*out, "0\r\n\r\n"...)
}

// finalHeader settles the header as net/http's chunkWriter.writeHeader
// does once the handler is done: what it adds, and what it removes from
// the handler's.
func (w *h1Writer) finalHeader(shutting bool) extraHeader {
	h := w.header
	x := extraHeader{clen: -1}
	hasTE := get(h, "Transfer-Encoding") != ""
	allowed := bodyAllowed(w.status)
	if !hasTE && allowed && !has(h, "Content-Length") && len(w.body) <= bufferBeforeChunking {
		w.clen = int64(len(w.body))
		x.clen = len(w.body)
	}
	if get(h, "Connection") == "close" || shutting {
		w.closeAfter = true
	}
	if allowed {
		if _, haveType := h["Content-Type"]; !haveType && get(h, "Content-Encoding") == "" && !hasTE && len(w.body) > 0 {
			x.ctype = http.DetectContentType(w.body)
		}
	} else {
		for _, k := range suppressedHeaders(w.status) {
			delete(h, k)
		}
	}
	if !has(h, "Date") {
		x.date = httpDate(time.Now())
	}
	x.chunked = w.framing(allowed)
	if x.chunked {
		x.clen = -1
	}
	if w.closeAfter && !hasToken(get(h, "Connection"), "close") {
		delete(h, "Connection")
		x.conn = "close"
	}
	return x
}

// framing decides between Content-Length and chunking, as net/http
// does, and reports chunking.
func (w *h1Writer) framing(allowed bool) bool {
	h := w.header
	te := get(h, "Transfer-Encoding")
	hasCL := w.clen >= 0
	if hasCL && te != "" && te != "identity" {
		w.c.h.logf("http: WriteHeader called with both Transfer-Encoding of %q and a Content-Length of %d", te, w.clen)
		delete(h, "Content-Length")
		hasCL = false
	}
	switch {
	case !allowed || w.status == http.StatusNoContent, hasCL:
		delete(h, "Transfer-Encoding")
		return false
	case te == "identity":
		w.closeAfter = true
		delete(h, "Transfer-Encoding")
		return false
	}
	if te == "chunked" {
		delete(h, "Transfer-Encoding")
	}
	delete(h, "Content-Length")
	return true
}

// short: the handler declared a longer body than it wrote; net/http
// then closes the connection after the answer.
func (w *h1Writer) short() bool {
	return w.clen >= 0 && int64(len(w.body)) != w.clen && bodyAllowed(w.status)
}

func appendStatusLine(b []byte, code int) []byte {
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(code), 10)
	if text := http.StatusText(code); text != "" {
		return append(append(append(b, ' '), text...), "\r\n"...)
	}
	return append(b, " status code "+strconv.Itoa(code)+"\r\n"...)
}

// get is h.Get for a key already canonical, without canonicalising it
// again: the lean writers ask for constants, a few per answer.
func get(h http.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// appendHeader appends h as net/http's Header.Write writes it (without
// Content-Length and Transfer-Encoding if noFraming, as net/http writes a
// 1xx answer's): keys sorted, invalid names left out, every value trimmed
// of surrounding whitespace with its CRs and LFs turned into spaces, without
// Header.Write's pooled sorter, string replacer and four interface writes
// per line (with get's lookups, an answer renders in 298 ns, not 410:
// BenchmarkRenderAnswer).
func appendHeader(b []byte, h http.Header, noFraming bool) []byte {
	var stack [8]string
	keys := stack[:0]
	for k := range h {
		if !noFraming || k != "Content-Length" && k != "Transfer-Encoding" {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !httpguts.ValidHeaderFieldName(k) {
			continue
		}
		for _, v := range h[k] {
			b = append(append(b, k...), ": "...)
			// Trimming first is the same: CR and LF are whitespace to
			// textproto.TrimString, and spaces once replaced.
			v = textproto.TrimString(v)
			if strings.IndexByte(v, '\r') < 0 && strings.IndexByte(v, '\n') < 0 {
				b = append(b, v...)
			} else {
				for _, c := range []byte(v) {
					if c == '\r' || c == '\n' {
						c = ' '
					}
					b = append(b, c)
				}
			}
			b = append(b, "\r\n"...)
		}
	}
	return b
}

func has(h http.Header, key string) bool {
	_, ok := h[key]
	return ok
}

// bodyAllowed is net/http's bodyAllowedForStatus.
func bodyAllowed(status int) bool {
	switch {
	case status >= 100 && status <= 199, status == http.StatusNoContent, status == http.StatusNotModified:
		return false
	}
	return true
}

// suppressedHeaders is net/http's: headers an answer without a body
// does not carry.
func suppressedHeaders(status int) []string {
	switch {
	case status == http.StatusNotModified:
		return []string{"Content-Type", "Content-Length", "Transfer-Encoding"}
	case !bodyAllowed(status):
		return []string{"Content-Length", "Transfer-Encoding"}
	}
	return nil
}

func hasToken(v, token string) bool {
	for f := range strings.SplitSeq(v, ",") {
		if strings.EqualFold(strings.TrimSpace(f), token) {
			return true
		}
	}
	return false
}

// h1Body is a request body the lean path read before the handler:
// whole, or up to the read timeout, err.
type h1Body struct {
	b           []byte
	closed, eof bool
	err         error // what follows b: nil for io.EOF
}

func (b *h1Body) Read(p []byte) (int, error) {
	if b.closed {
		return 0, http.ErrBodyReadAfterClose
	}
	if b.eof {
		return 0, b.end()
	}
	n := copy(p, b.b)
	b.b = b.b[n:]
	if len(b.b) == 0 {
		b.eof = true
		return n, b.end()
	}
	return n, nil
}

func (b *h1Body) end() error {
	if b.err != nil {
		return b.err
	}
	return io.EOF
}

// Close consumes the rest, as net/http's server body does.
func (b *h1Body) Close() error {
	b.closed, b.eof, b.b = true, true, nil
	return nil
}

// dateCache is the Date header of the current second: net/http formats
// it for every answer.
var dateCache atomic.Pointer[struct {
	sec  int64
	text string
}]

func httpDate(now time.Time) string {
	sec := now.Unix()
	if d := dateCache.Load(); d != nil && d.sec == sec {
		return d.text
	}
	d := &struct {
		sec  int64
		text string
	}{sec, now.UTC().Format(http.TimeFormat)}
	dateCache.Store(d)
	return d.text
}
