package api

import (
	"bytes"
	"net/http"
	"strconv"
	"testing"
)

// BenchmarkRenderAnswer renders the compatibility flow's two answers, an
// id as text and a reservation as JSON, as a connection's writer does.
func BenchmarkRenderAnswer(b *testing.B) {
	c := &h1Conn{}
	c.rw = h1Writer{c: c, header: http.Header{}, clen: -1}
	id := []byte("0b1f6a52-5f0c-4e55-9a4e-0d6a8e1b2c3d")
	res := []byte(`{"id":"0b1f6a52-5f0c-4e55-9a4e-0d6a8e1b2c3d","eventId":"e1","areaId":"a1","userId":"u1","numOfSeats":2,"state":"FAILED","seats":[]}`)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		c.rw.reset()
		if i&1 == 0 {
			Write(&c.rw, http.StatusOK, false, id)
		} else {
			Write(&c.rw, http.StatusOK, true, res)
		}
		c.rw.render(false)
	}
}

// FuzzAppendHeader: appendHeader writes every header as net/http's
// Header.Write does, and as its WriteSubset without the framing headers
// for a 1xx answer, byte for byte: names odd or invalid, values with CRs,
// LFs and whitespace around or inside, one key or many.
func FuzzAppendHeader(f *testing.F) {
	f.Add("Content-Type", "application/json", "X-Id", " a\r\nb \t", "bad name", "v")
	f.Add("A", "", "a", "\n", "Ü", "x\ry")
	f.Add("Set-Cookie", "a=1", "Set-Cookie", "b=2", "Date", "Mon, 01 Jan 2024 00:00:00 GMT")
	f.Add("Link", "</a>; rel=preload", "Content-Length", "0", "Transfer-Encoding", "chunked")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2, k3, v3 string) {
		h := http.Header{}
		for _, kv := range [][2]string{{k1, v1}, {k2, v2}, {k3, v3}} {
			h[kv[0]] = append(h[kv[0]], kv[1])
		}
		for i := range 10 * len(k3) % 12 {
			h[k3+strconv.Itoa(i)] = []string{v1, v2}
		}
		for _, noFraming := range []bool{false, true} {
			var want bytes.Buffer
			var exclude map[string]bool
			if noFraming {
				exclude = map[string]bool{"Content-Length": true, "Transfer-Encoding": true}
			}
			if err := h.WriteSubset(&want, exclude); err != nil {
				t.Fatal(err)
			}
			if got := appendHeader([]byte("x"), h, noFraming); string(got[1:]) != want.String() {
				t.Fatalf("appendHeader (no framing %v) wrote\n%q\nHeader.WriteSubset\n%q", noFraming, got[1:], want.String())
			}
		}
	})
}

// A connection keeps its writer's body buffer between answers, but not a
// large answer's once it is written: 690 idle kept-alive connections
// that had each got a 1.6 MB answer held 1.3 GB until their next request.
func TestLargeAnswerBufferNotKept(t *testing.T) {
	c := &h1Conn{}
	c.rw = h1Writer{c: c, header: http.Header{}, clen: -1}
	for _, tc := range []struct {
		size int
		kept bool
	}{{100, true}, {largeAnswer, true}, {largeAnswer + 1, false}} {
		c.rw.reset()
		Write(&c.rw, http.StatusOK, false, make([]byte, tc.size))
		c.rw.answered() // written: the connection idles until its next request
		if kept := cap(c.rw.body) >= tc.size; kept != tc.kept {
			t.Errorf("after an answer of %d bytes the buffer holds %d (kept %v, want %v)", tc.size, cap(c.rw.body), kept, tc.kept)
		}
	}
}
