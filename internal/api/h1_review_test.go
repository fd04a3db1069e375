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
	t.lockShards()
	defer t.unlockShards()
	n := 0
	for i := range t.shards {
		for _, l := range []*connList{&t.shards[i].new, &t.shards[i].idle} {
			for c := l.head; c != nil; c = c.next {
				n++
			}
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
	s, addr := startServer(t, h, h1Limits(Limits{Lean: lean}), nil)
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
	_, leanAddr := startServer(t, h, h1Limits(Limits{Lean: lean, ReadTimeout: readTimeout}), nil)
	_, stdAddr := startServer(t, h, h1Limits(Limits{ReadTimeout: readTimeout}), nil)
	wantStatus, wantBody, wantClose := trickle(t, stdAddr, gap)
	if wantStatus != http.StatusBadRequest || !strings.Contains(wantBody, "timeout") || !wantClose {
		t.Fatalf("net/http answered %d %q (close %v); the test expects it to cut the body", wantStatus, wantBody, wantClose)
	}
	if st, body, closes := trickle(t, leanAddr, gap); st != wantStatus || !strings.Contains(body, "timeout") || !closes {
		t.Errorf("lean path answered %d %q (close %v); net/http %d %q", st, body, closes, wantStatus, wantBody)
	}
}

// TestLeanH1WaiterWhoLeavesFreesItsPlace: a lean request waiting in
// the waiting room whose client closes its connection leaves the room,
// as net/http's would (TestWaiterWhoLeavesFreesItsPlace), rather than
// keeping its place and being served for no one.
func TestLeanH1WaiterWhoLeavesFreesItsPlace(t *testing.T) {
	h := newOrderHandler()
	s, addr := startLean(t, h, Limits{MaxInflight: 1})
	first, leaving := oneInOneWaiting(t, s, h, addr)
	leaving.Close()
	awaitCond(t, "the waiter whose client left to leave", func() bool { return s.inflight.queued.Load() == 0 })
	h.release <- struct{}{}
	if r, _, err := first.answer(); err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("the first request: %v", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if strings.Join(h.order, ",") != "0" {
		t.Fatalf("handled %v; want 0 (the request that left never handled)", h.order)
	}
	if n := s.inflight.n.Load(); n != 0 {
		t.Fatalf("%d slots still taken after every request ended", n)
	}
}

// TestLeanH1ServedWaiterKeepsItsWatch: a lean request that waited in
// the waiting room is served with the context that watches its client,
// so a client that leaves while the handler runs still ends it (its
// plain request context could never be done).
func TestLeanH1ServedWaiterKeepsItsWatch(t *testing.T) {
	h := newOrderHandler()
	ended := make(chan bool, 1)
	waiterSees := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("i") != "1" {
			h.ServeHTTP(w, r)
			return
		}
		select {
		case <-r.Context().Done():
			ended <- true
		case <-time.After(hang):
			ended <- false
		}
	})
	s, addr := startLean(t, waiterSees, Limits{MaxInflight: 1})
	_, waiter := oneInOneWaiting(t, s, h, addr)
	h.release <- struct{}{}
	awaitCond(t, "the waiter in the handler", func() bool { return s.inflight.queued.Load() == 0 })
	waiter.Close()
	if !<-ended {
		t.Fatal("the served waiter's context was not done when its client left")
	}
}

// TestLeanH1WatchedWaiterKeepsPipelinedRequests: the watch of a waiting
// lean request reads the client's next requests ahead; they are served
// after it, in order, none lost or doubled, and the connection stays
// lean.
func TestLeanH1WatchedWaiterKeepsPipelinedRequests(t *testing.T) {
	h := newOrderHandler()
	s, addr := startLean(t, h, Limits{MaxInflight: 1})
	first, c := oneInOneWaiting(t, s, h, addr)
	for _, p := range []string{"/a", "/b"} {
		if err := c.send(p); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(50 * time.Millisecond) // the watch reads them, if it is to
	h.release <- struct{}{}
	if r, _, err := first.answer(); err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("the first request: %v", err)
	}
	h.release <- struct{}{}
	for i := range 3 {
		if r, body, err := c.answer(); err != nil || r.StatusCode != http.StatusOK || body != "ok\n" {
			t.Fatalf("answer %d on the watched connection: %v %v %q", i, err, r, body)
		}
	}
	if err := c.send("/c"); err != nil {
		t.Fatal(err)
	}
	if r, _, err := c.answer(); err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("a request after them: %v", err)
	}
	leanServed(t, s, 5)
}

// TestLeanH1WatchOutlivesReadDeadlines: a lean request that waits in the
// waiting room past the header and read timeouts (which bound reading
// it, not serving it) is not taken for one whose client left.
func TestLeanH1WatchOutlivesReadDeadlines(t *testing.T) {
	const timeout = 200 * time.Millisecond
	h := newOrderHandler()
	s, addr := startLean(t, h, Limits{MaxInflight: 1, ReadHeaderTimeout: timeout, ReadTimeout: timeout})
	first, waiting := oneInOneWaiting(t, s, h, addr)
	time.Sleep(3 * timeout)
	if n := s.inflight.queued.Load(); n != 1 {
		t.Fatalf("%d requests waiting past the read timeouts, want 1", n)
	}
	for range 2 {
		select {
		case h.release <- struct{}{}:
		case <-time.After(hang):
			t.Fatal("a request never reached the handler")
		}
	}
	for i, c := range []*rawConn{first, waiting} {
		if r, body, err := c.answer(); err != nil || r.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %v %v %q", i, err, r, body)
		}
	}
}

// TestLeanH1WatchedRequestPanics: a handler that panics after a wait in
// the waiting room ends its watch too: the route's recovery answers 500
// and the connection serves its next request.
func TestLeanH1WatchedRequestPanics(t *testing.T) {
	entered, release := make(chan struct{}, 1), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/block":
			entered <- struct{}{}
			<-release
		case "/panic":
			panic("after the wait")
		}
		io.WriteString(w, "ok\n")
	})
	s, addr := startLean(t, h, Limits{MaxInflight: 1})
	first := dial(t, addr)
	if err := first.send("/block"); err != nil {
		t.Fatal(err)
	}
	<-entered
	panicking := dial(t, addr)
	if err := panicking.send("/panic"); err != nil {
		t.Fatal(err)
	}
	awaitCond(t, "the waiter", func() bool { return s.inflight.queued.Load() == 1 })
	close(release)
	if r, _, err := first.answer(); err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("the first request: %v", err)
	}
	if r, _, err := panicking.answer(); err != nil || r.StatusCode != http.StatusInternalServerError {
		t.Fatalf("the panicking request: %v %v", err, r)
	}
	if r, _, err := panicking.get("/"); err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("a request after the panic: %v", err)
	}
	leanServed(t, s, 3)
}

// oneInOneWaiting sends a request that h holds in its handler, then one
// that waits in the room behind it (s admits one at a time), each on a
// connection of its own, and returns the two connections.
func oneInOneWaiting(t *testing.T, s *Server, h *orderHandler, addr string) (first, waiter *rawConn) {
	t.Helper()
	first = dial(t, addr)
	if err := first.send("/block?i=0"); err != nil {
		t.Fatal(err)
	}
	awaitCond(t, "the first request in the handler", func() bool { return len(h.entered) == 1 })
	waiter = dial(t, addr)
	if err := waiter.send("/block?i=1"); err != nil {
		t.Fatal(err)
	}
	awaitCond(t, "the waiter", func() bool { return s.inflight.queued.Load() == 1 })
	return first, waiter
}
