package api

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// Buffer pool for response bodies, so a hot route builds its JSON by
// appending into a reused slice instead of allocating per request.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// GetBuf returns an empty pooled buffer; PutBuf gives it back.
func GetBuf() *[]byte { b := bufPool.Get().(*[]byte); *b = (*b)[:0]; return b }

// PutBuf returns a buffer to the pool unless it grew too large to keep.
func PutBuf(b *[]byte) {
	if cap(*b) <= 64<<10 {
		bufPool.Put(b)
	}
}

var (
	hdrJSON = []string{"application/json"}
	hdrText = []string{"text/plain; charset=utf-8"}
	// An empty body's length is set, shared: net/http adds none to a HEAD
	// answer that wrote nothing.
	hdrZero = []string{"0"}
)

// implicitLengthMax is the largest body whose Content-Length Write leaves
// to net/http: a handler that returns having written at most this much
// (its HTTP/1.1 buffer before it turns to chunking is 2 KiB, its HTTP/2
// one 4 KiB) gets the header from the server, the same value at no
// allocation, where setting it costs two per reply.
const implicitLengthMax = 2 << 10

// Write sends body with the given status and content type. It must be the
// handler's last write: a small body's Content-Length is the server's to
// add when the handler returns.
func Write(w http.ResponseWriter, status int, json bool, body []byte) {
	h := w.Header()
	if json {
		h["Content-Type"] = hdrJSON
	} else {
		h["Content-Type"] = hdrText
	}
	switch {
	case len(body) == 0:
		h["Content-Length"] = hdrZero
	case len(body) > implicitLengthMax:
		h["Content-Length"] = []string{strconv.Itoa(len(body))}
	}
	w.WriteHeader(status)
	w.Write(body)
}

// ErrorShaper is implemented by the ResponseWriter of a route family
// whose clients expect errors in another JSON shape than {"error"} (the
// commerce compat routes: their peer's). Error asks it for the body.
type ErrorShaper interface {
	AppendError(b []byte, status int, msg string) []byte
}

// Error sends {"error": msg} (or w's own shape, see ErrorShaper) with
// status and returns status.
func Error(w http.ResponseWriter, status int, msg string) int {
	b := GetBuf()
	if s, ok := w.(ErrorShaper); ok {
		*b = s.AppendError(*b, status, msg)
	} else {
		*b = append(*b, `{"error":`...)
		*b = AppendString(*b, msg)
		*b = append(*b, "}\n"...)
	}
	if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
		if h := w.Header(); h.Get("Retry-After") == "" {
			// No prediction of the wait: a second, the smallest pause.
			h.Set("Retry-After", "1")
		}
	}
	Write(w, status, true, *b)
	PutBuf(b)
	return status
}

// BodyError maps an error from reading a size-limited body to a reply.
func BodyError(w http.ResponseWriter, err error) int {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		if lw, ok := serverWriter(w).(*h1Writer); ok {
			lw.requestTooLarge() // net/http's writer learns it from http.MaxBytesReader
		}
		return Error(w, http.StatusRequestEntityTooLarge, "request body is larger than "+strconv.FormatInt(tooBig.Limit, 10)+" bytes")
	}
	return Error(w, http.StatusBadRequest, "reading request body: "+err.Error())
}

// MaxEcho is how many bytes of a client's string an error message repeats:
// enough to recognise it, and a 60 KB id still gets a small answer.
const MaxEcho = 64

// Quote renders a client-supplied string for an error message: quoted and
// escaped like %q, cut after MaxEcho bytes (at a character boundary) with
// "…" and the full length, so the answer stays small whatever was sent.
func Quote(s string) string {
	if len(s) <= MaxEcho {
		return strconv.Quote(s)
	}
	cut := MaxEcho
	// Back up to the start of a character, but never further than one
	// character's length: in invalid UTF-8 every byte may be a
	// continuation byte.
	for i := 0; i < utf8.UTFMax-1 && !utf8.RuneStart(s[cut]); i++ {
		cut--
	}
	return strconv.Quote(s[:cut]) + "… (" + strconv.Itoa(len(s)) + " bytes)"
}

// CheckBody refuses a request before any of its body is read: 413 if the
// declared Content-Length is over limit, 415 if Content-Type says the body
// is not JSON. A missing Content-Type is accepted (simple clients send
// none). It returns the status it answered, or 0.
//
// Refusing on the declared length matters: a handler that starts reading
// makes net/http send "100 Continue" and then waits for bytes the client
// may trickle until the read timeout; answering first means neither
// happens.
func CheckBody(w http.ResponseWriter, r *http.Request, limit int64) int {
	if r.ContentLength > limit {
		if r.ProtoMajor == 1 {
			// Otherwise net/http would try to drain a body of up to 256 KiB
			// before it sends the answer, waiting on a client that is
			// waiting for us.
			w.Header().Set("Connection", "close")
		}
		return Error(w, http.StatusRequestEntityTooLarge, "request body is larger than "+strconv.FormatInt(limit, 10)+
			" bytes (Content-Length: "+strconv.FormatInt(r.ContentLength, 10)+")")
	}
	for _, ct := range r.Header["Content-Type"] {
		if ct != "" && !IsJSONType(ct) {
			return Error(w, http.StatusUnsupportedMediaType, "Content-Type "+Quote(ct)+
				" is not JSON: send the body with Content-Type: application/json (or without a Content-Type)")
		}
	}
	return 0
}

// IsJSONType reports whether a Content-Type value names JSON:
// application/json or application/<anything>+json, in any case, with any
// parameters. It does not allocate: it runs on every reservation.
func IsJSONType(v string) bool {
	if i := strings.IndexByte(v, ';'); i >= 0 {
		v = v[:i]
	}
	v = strings.TrimSpace(v)
	const app = "application/"
	if len(v) <= len(app) || !strings.EqualFold(v[:len(app)], app) {
		return false
	}
	sub := v[len(app):]
	if strings.EqualFold(sub, "json") {
		return true
	}
	const suffix = "+json"
	return len(sub) > len(suffix) && strings.EqualFold(sub[len(sub)-len(suffix):], suffix) &&
		!strings.ContainsAny(sub, "/ \t")
}

const hexDigits = "0123456789abcdef"

// plainJSON marks the bytes a JSON string holds as they are: printable
// ASCII but for the quote and the backslash.
var plainJSON = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// AppendString appends s as a JSON string literal.
func AppendString(b []byte, s string) []byte {
	b = append(b, '"')
	i := 0
	for i < len(s) && plainJSON[s[i]] {
		i++
	}
	if i == len(s) {
		// The common case (ids, names): one copy.
		b = append(b, s...)
		return append(b, '"')
	}
	start := 0
	for i < len(s) {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
