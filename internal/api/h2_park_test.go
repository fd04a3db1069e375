package api

import (
	"io"
	"net/http"
	"testing"

	"golang.org/x/net/http2"
)

// A crowd on lean routes waits in the room as stream records: the
// handlers that parked them have returned (the connection counts only
// the one holding the slot), a waiter whose client resets its stream
// leaves the room, and once the slot frees, every other waiter is
// answered by the route.
func TestH2LeanCrowdWaitsWithoutHandlers(t *testing.T) {
	const crowd = 40
	var m Metrics
	m.lean = &LeanRoutes{}
	mux := http.NewServeMux()
	m.lean.mark(mux, "POST /lean")
	hold, held := make(chan struct{}), make(chan struct{})
	mux.HandleFunc("POST /lean", func(w http.ResponseWriter, r *http.Request) {
		if b, _ := io.ReadAll(r.Body); string(b) == "hold" {
			close(held)
			<-hold
		}
		io.WriteString(w, "served")
	})
	s, addr := startServer(t, mux, leanH2(Limits{Lean: m.lean, MaxInflight: 1, WaitingRoom: 1000, MaxStreams: 100}), nil)
	c := dialH2(t, addr)
	c.open(t, 1, "POST", "/lean", false)
	c.fr.WriteData(1, true, []byte("hold"))
	<-held
	for i := range crowd {
		id := uint32(3 + 2*i)
		c.open(t, id, "POST", "/lean", false)
		c.fr.WriteData(id, true, []byte("x"))
	}
	awaitCond(t, "the crowd in the room", func() bool { return s.inflight.queued.Load() == crowd })
	awaitCond(t, "the parking handlers returned", func() bool { return leanHandlersRunning(s) == 1 })

	gone := uint32(3)
	c.fr.WriteRSTStream(gone, http2.ErrCodeCancel)
	awaitCond(t, "the reset waiter out of the room", func() bool { return s.inflight.queued.Load() == crowd-1 })
	close(hold)

	answered := map[uint32]string{}
	for len(answered) < crowd { // the holder and every waiter but the one gone
		f := c.until(t, "the waiters' answers", func(f http2.Frame) bool {
			d, ok := f.(*http2.DataFrame)
			return ok && d.StreamEnded()
		})
		d := f.(*http2.DataFrame)
		answered[d.StreamID] += string(d.Data())
	}
	for id, body := range answered {
		if id == gone || body != "served" {
			t.Errorf("stream %d answered %q", id, body)
		}
	}
	if got := s.inflight.outcomes[waitClientGone].Load(); got != 1 {
		t.Errorf("client_gone = %d, want 1", got)
	}
	if got := s.inflight.outcomes[waitServed].Load(); got != crowd-1 {
		t.Errorf("served after waiting = %d, want %d", got, crowd-1)
	}
	awaitCond(t, "every slot released", func() bool { return s.inflight.n.Load() == 0 })
}

// leanHandlersRunning is how many handlers the lean server's connections
// run now.
func leanHandlersRunning(s *Server) int {
	s.h2.mu.Lock()
	defer s.h2.mu.Unlock()
	n := 0
	for c := range s.h2.conns {
		c.mu.Lock()
		n += c.handlers
		c.mu.Unlock()
	}
	return n
}
