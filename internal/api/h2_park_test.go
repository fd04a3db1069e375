package api

import (
	"io"
	"net"
	"net/http"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// A crowd on lean routes waits in the room as stream records: the
// handlers that parked them have returned (the connection counts only
// the one holding the slot), a waiter whose client resets its stream
// leaves the room, and once the slot frees, every other waiter is
// answered by the route.
func TestH2LeanCrowdWaitsWithoutHandlers(t *testing.T) {
	leanCrowdWaits(t, func(h http.Handler, lim Limits) (*Server, *rawH2) {
		s, addr := startServer(t, h, leanH2(lim), nil)
		return s, dialH2(t, addr)
	}, false)
}

// holdingRoute is a mux with one lean route, POST /lean: a request whose
// body is "hold" holds its in-flight slot until hold is closed (held
// says it has it); every other is answered "served".
type holdingRoute struct {
	lean       *LeanRoutes
	mux        *http.ServeMux
	hold, held chan struct{}
	sawTLS     atomic.Int64 // route runs that saw r.TLS
}

func newHoldingRoute() *holdingRoute {
	rt := &holdingRoute{lean: &LeanRoutes{}, mux: http.NewServeMux(), hold: make(chan struct{}), held: make(chan struct{})}
	rt.lean.mark(rt.mux, "POST /lean")
	rt.mux.HandleFunc("POST /lean", func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil {
			rt.sawTLS.Add(1)
		}
		if b, _ := io.ReadAll(r.Body); string(b) == "hold" {
			close(rt.held)
			<-rt.hold
		}
		io.WriteString(w, "served")
	})
	return rt
}

// leanCrowdWaits runs a crowd of 40 on a lean route, one slot, over the
// server and connection start gives (h2c or TLS); overTLS: every route
// run must see r.TLS.
func leanCrowdWaits(t *testing.T, start func(http.Handler, Limits) (*Server, *rawH2), overTLS bool) {
	const crowd = 40
	rt := newHoldingRoute()
	hold, held := rt.hold, rt.held
	s, c := start(rt.mux, Limits{Lean: rt.lean, MaxInflight: 1, WaitingRoom: 1000, MaxStreams: 100})
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
	if got := rt.sawTLS.Load(); overTLS && got != crowd {
		t.Errorf("%d of %d route runs saw r.TLS", got, crowd)
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

// BenchmarkH2WaiterMemory measures what a request waiting in the room
// costs, on net/http's HTTP/2 server and on the lean one: 8,000 lean-route
// streams over 80 connections wait for the one slot, and the heap and
// stacks in use (after a collection) and the goroutines are compared with
// before they came. The client's side of each stream is in the same
// process but small (a few HPACK bytes). Reported per waiter:
//
//	go test -run X -bench H2WaiterMemory -benchtime 1x ./internal/api/
func BenchmarkH2WaiterMemory(b *testing.B) {
	for _, lean := range []bool{false, true} {
		name := "nethttp"
		if lean {
			name = "lean"
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				perWaiter, goroutines := waiterMemory(b, lean, 80, 100)
				b.ReportMetric(perWaiter, "B/waiter")
				b.ReportMetric(goroutines, "goroutines/waiter")
			}
		})
	}
}

func waiterMemory(b *testing.B, lean bool, conns, streams int) (perWaiter, goroutines float64) {
	rt := newHoldingRoute()
	hold, held := rt.hold, rt.held
	lim := Limits{Lean: rt.lean, MaxInflight: 1, WaitingRoom: conns * streams * 2, MaxStreams: streams + 1}
	if lean {
		lim = leanH2(lim)
	}
	s := NewServer("127.0.0.1:0", rt.mux, lim, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go s.Serve(ln)
	defer s.Close()
	addr := ln.Addr().String()
	t := &testing.T{}
	cs := make([]*rawH2, conns)
	for i := range cs {
		cs[i] = dialH2(t, addr)
		defer cs[i].Close()
	}
	cs[0].open(t, 1, "POST", "/lean", false)
	cs[0].fr.WriteData(1, true, []byte("hold"))
	<-held
	time.Sleep(h2WorkerIdle + 500*time.Millisecond) // as after: no idle handler goroutines
	before, g0 := inUse()
	for i, c := range cs {
		for j := range streams {
			id := uint32(3 + 2*j)
			if i == 0 && j == streams-1 {
				break // stream 1 is the holder's
			}
			c.open(t, id, "POST", "/lean", false)
			c.fr.WriteData(id, true, []byte("x"))
		}
	}
	want := int64(conns*streams - 1)
	for deadline := time.Now().Add(time.Minute); s.inflight.queued.Load() < want; {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d streams in the room", s.inflight.queued.Load(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(h2WorkerIdle + 500*time.Millisecond) // idle handler goroutines gone
	after, g1 := inUse()
	close(hold)
	return float64(int64(after)-int64(before)) / float64(want), float64(g1-g0) / float64(want)
}

// inUse is the heap and stacks in use after a collection, and the
// goroutines. Two collections: the first may leave what its sweep freed
// and the stacks it shrinks for the second to count.
func inUse() (bytes uint64, goroutines int) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse + ms.StackInuse, runtime.NumGoroutine()
}
