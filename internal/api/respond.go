package api

import (
	"errors"
	"net/http"
	"strconv"
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
)

// Write sends body with the given status and content type.
func Write(w http.ResponseWriter, status int, json bool, body []byte) {
	h := w.Header()
	if json {
		h["Content-Type"] = hdrJSON
	} else {
		h["Content-Type"] = hdrText
	}
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	w.WriteHeader(status)
	w.Write(body)
}

// Error sends {"error": msg} with status and returns status.
func Error(w http.ResponseWriter, status int, msg string) int {
	b := GetBuf()
	*b = append(*b, `{"error":`...)
	*b = AppendString(*b, msg)
	*b = append(*b, "}\n"...)
	if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	Write(w, status, true, *b)
	PutBuf(b)
	return status
}

// BodyError maps an error from reading a size-limited body to a reply.
func BodyError(w http.ResponseWriter, err error) int {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return Error(w, http.StatusRequestEntityTooLarge, "request body is larger than "+strconv.FormatInt(tooBig.Limit, 10)+" bytes")
	}
	return Error(w, http.StatusBadRequest, "reading request body: "+err.Error())
}

const hexDigits = "0123456789abcdef"

// AppendString appends s as a JSON string literal.
func AppendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
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
