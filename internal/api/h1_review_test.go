package api

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// listed counts the tracker's connections in its new and idle lists.
func (t *connTracker) listed() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, l := range []*connList{&t.new, &t.idle} {
		for c := l.head; c != nil; c = c.next {
			n++
		}
	}
	return n
}

// TestLeanH1CountsEveryConnOnce: after every request of the corpus
// (lean, handed off at once or mid-way, panicking, over a limit), each
// connection the client closed is closed on the server too, its slot
// freed once: none leaks in the count or the tracker's lists.
func TestLeanH1CountsEveryConnOnce(t *testing.T) {
	h, lean := h1TestMux()
	s, addr := startServer(t, h, Limits{Lean: lean}, nil)
	for _, tc := range h1Cases {
		exchange(t, addr, tc.segs)
		deadline := time.Now().Add(hang)
		for s.conns.openConns() != 0 || s.conns.listed() != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("after %q: %d connections open, %d listed, want none", tc.name, s.conns.openConns(), s.conns.listed())
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// trickle sends a POST of /raw whose 8-byte body comes a byte every
// gap, and returns the answer's status and body, and whether it closes
// the connection.
func trickle(t *testing.T, addr string, gap time.Duration) (int, string, bool) {
	t.Helper()
	c := dial(t, addr)
	if _, err := io.WriteString(c, "POST /raw HTTP/1.1\r\nHost: a\r\nContent-Length: 8\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		time.Sleep(gap)
		if _, err := c.Write([]byte{'0' + byte(i)}); err != nil {
			break // answered and closed already
		}
	}
	r, body, err := c.answer()
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	return r.StatusCode, body, r.Close
}

// TestLeanH1BodyWithinReadTimeout: --read-timeout bounds a lean
// request's head and body together, as net/http bounds them: a body
// still trickling in at the deadline is cut there and the handler sees
// the timeout, rather than the request being handed to net/http, whose
// own read timeout would start again and let it finish.
func TestLeanH1BodyWithinReadTimeout(t *testing.T) {
	const readTimeout, gap = time.Second, 200 * time.Millisecond // the body's last byte at 1.6 s
	h, lean := h1TestMux()
	_, leanAddr := startServer(t, h, Limits{Lean: lean, ReadTimeout: readTimeout}, nil)
	_, stdAddr := startServer(t, h, Limits{ReadTimeout: readTimeout}, nil)
	wantStatus, wantBody, wantClose := trickle(t, stdAddr, gap)
	if wantStatus != http.StatusBadRequest || !strings.Contains(wantBody, "timeout") || !wantClose {
		t.Fatalf("net/http answered %d %q (close %v); the test expects it to cut the body", wantStatus, wantBody, wantClose)
	}
	if st, body, closes := trickle(t, leanAddr, gap); st != wantStatus || !strings.Contains(body, "timeout") || !closes {
		t.Errorf("lean path answered %d %q (close %v); net/http %d %q", st, body, closes, wantStatus, wantBody)
	}
}
