package api

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// leanAll serves h on one route marked lean, so every plain HTTP/1.1
// request takes the lean path.
func leanAll(h http.Handler) (http.Handler, *LeanRoutes) {
	mux := http.NewServeMux()
	m := NewMetrics(prometheus.NewRegistry())
	m.HandleLean(mux, "/", func(w http.ResponseWriter, r *http.Request) int {
		h.ServeHTTP(w, r)
		return http.StatusOK
	})
	return mux, m.Lean()
}

func startLean(t *testing.T, h http.Handler, lim Limits) (*Server, string) {
	t.Helper()
	mux, lean := leanAll(h)
	lim.Lean = lean
	return startServer(t, mux, lim, nil)
}

// served checks that the lean path, not net/http, served n requests.
func leanServed(t *testing.T, s *Server, n uint64) {
	t.Helper()
	if got := s.h1.served.Load(); got != n {
		t.Fatalf("the lean path served %d requests, want %d (handed off: %d)", got, n, s.h1.handedOff.Load())
	}
}

// TestLeanH1IdleTimeout: a kept-alive connection the lean path serves is
// closed after --idle-timeout without a request, and counts as idle for
// the tracker meanwhile.
func TestLeanH1IdleTimeout(t *testing.T) {
	s, addr := startLean(t, okHandler(), Limits{IdleTimeout: 200 * time.Millisecond})
	c := dial(t, addr)
	if r, _, err := c.get("/"); err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("first request: %v", err)
	}
	leanServed(t, s, 1)
	if !c.closedByServer() {
		t.Error("the idle connection was kept past the idle timeout")
	}
}

// TestLeanH1HeaderTimeout: a head trickled on a kept-alive connection
// is cut at the header timeout, as net/http cuts it.
func TestLeanH1HeaderTimeout(t *testing.T) {
	s, addr := startLean(t, okHandler(), Limits{ReadHeaderTimeout: 200 * time.Millisecond})
	c := dial(t, addr)
	if r, _, err := c.get("/"); err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("first request: %v", err)
	}
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: surge\r\n"); err != nil {
		t.Fatal(err)
	}
	if !c.closedByServer() {
		t.Error("a head that never ends held the connection past the header timeout")
	}
	leanServed(t, s, 1)
}

// TestLeanH1IdleConnIsShedAtCap: at --max-conns the connection the lean
// path left idle longest is shed for a newcomer, and one with a request
// in flight is not.
func TestLeanH1IdleConnIsShedAtCap(t *testing.T) {
	entered, release := make(chan struct{}, 1), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
			<-release
		}
		io.WriteString(w, "ok\n")
	})
	s, addr := startLean(t, h, Limits{MaxConns: 2})
	idle := dial(t, addr)
	if r, _, err := idle.get("/"); err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("first connection: %v", err)
	}
	waitIdle(t, s, 1)
	busy := dial(t, addr)
	if err := busy.send("/slow"); err != nil {
		t.Fatal(err)
	}
	<-entered
	if r, _, err := dial(t, addr).get("/"); err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("new connection at the cap: %v", err)
	}
	if !idle.closedByServer() {
		t.Error("the idle connection was not shed")
	}
	close(release)
	if r, _, err := busy.answer(); err != nil || r.StatusCode != http.StatusOK {
		t.Errorf("the busy connection: %v", err)
	}
	leanServed(t, s, 3)
}

// TestLeanH1Shutdown: a graceful shutdown closes lean connections that
// are idle at once and waits for a lean request in flight, which is
// answered with Connection: close.
func TestLeanH1Shutdown(t *testing.T) {
	entered, release := make(chan struct{}, 1), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
			<-release
		}
		io.WriteString(w, "ok\n")
	})
	s, addr := startLean(t, h, Limits{})
	idle := dial(t, addr)
	if r, _, err := idle.get("/"); err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("first connection: %v", err)
	}
	busy := dial(t, addr)
	if err := busy.send("/slow"); err != nil {
		t.Fatal(err)
	}
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(ctx) }()
	if !idle.closedByServer() {
		t.Error("the idle lean connection was not closed by the shutdown")
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) with a request in flight", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	r, body, err := busy.answer()
	if err != nil || r.StatusCode != http.StatusOK || body != "ok\n" || !r.Close {
		t.Errorf("the request in flight at shutdown: %v %v %q (close %v)", err, r, body, r != nil && r.Close)
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	leanServed(t, s, 2)
}

// TestLeanH1LeavesH2CToNetHTTP: h2c on the same port is served by
// net/http as before.
func TestLeanH1LeavesH2CToNetHTTP(t *testing.T) {
	s, addr := startLean(t, okHandler(), Limits{})
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	client := &http.Client{Transport: &http.Transport{Protocols: &p}, Timeout: hang}
	defer client.CloseIdleConnections()
	r, err := client.Get("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if r.ProtoMajor != 2 || string(b) != "ok\n" {
		t.Fatalf("h2c answer %s %q", r.Proto, b)
	}
	leanServed(t, s, 0)
	if s.h1.handedOff.Load() != 1 {
		t.Errorf("%d connections handed to net/http, want the h2c one", s.h1.handedOff.Load())
	}
}

// TestLeanH1ContextEndsWithTheRequest: a lean request's context carries
// the server's values and can never be done (h1_watch.go says why), so
// the engine waits for its answer with a plain receive; the context a
// watched request gets (watchClient) is done once the answer is written,
// net/http's rule for a request's context.
func TestLeanH1ContextEndsWithTheRequest(t *testing.T) {
	ctxs := make(chan [2]context.Context, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		if ctx.Value(http.ServerContextKey) == nil || ctx.Value(http.LocalAddrContextKey) == nil ||
			ctx.Value(streamsKey{}) == nil || ctx.Value(bodiesKey{}) == nil || ctx.Value(h1ConnKey{}) == nil {
			w.WriteHeader(http.StatusInternalServerError)
		}
		var watched context.Context
		if r.URL.Path == "/watched" {
			watched = watchClient(ctx)
		}
		ctxs <- [2]context.Context{ctx, watched}
		io.WriteString(w, "ok\n")
	})
	s, addr := startLean(t, h, Limits{})
	c := dial(t, addr)
	r, body, err := c.get("/")
	if err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("%v %v %q: the context lacks the server's values", err, r, body)
	}
	if got := <-ctxs; got[0].Done() != nil {
		t.Fatal("an unwatched lean request's context can be done: the engine's wait selects on it")
	}
	r, body, err = c.get("/watched")
	if err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("%v %v %q", err, r, body)
	}
	got := <-ctxs
	if got[1] == got[0] || got[1].Done() == nil {
		t.Fatal("watchClient returned the request's own context, which no client's leaving can end")
	}
	select {
	case <-got[1].Done():
	case <-time.After(hang):
		t.Fatal("the watched request's context is not done after its answer")
	}
	leanServed(t, s, 2)
}

// TestLeanConnContextEndsWithItsValues: a connection's context is flat
// only over values that never end; over a cancellable one (a
// ConnContext's own) it keeps the chain, so that requests end with it.
func TestLeanConnContextEndsWithItsValues(t *testing.T) {
	c := &h1Conn{}
	key := struct{ k string }{"k"}
	flat := connCtx(context.WithValue(context.Background(), key, "v"), c)
	if _, ok := flat.(*h1Ctx); !ok || flat.Value(key) != "v" || flat.Value(h1ConnKey{}) != c || flat.Done() != nil {
		t.Fatalf("over values: %T, %v, %v", flat, flat.Value(key), flat.Value(h1ConnKey{}))
	}
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), key, "v"))
	ctx := connCtx(parent, c)
	req, stop := context.WithCancel(ctx)
	defer stop()
	cancel()
	select {
	case <-req.Done():
	case <-time.After(hang):
		t.Fatal("a request's context outlived its connection's cancelled values")
	}
	if ctx.Value(key) != "v" || ctx.Value(h1ConnKey{}) != c {
		t.Fatal("the chain lost a value")
	}
}

// TestLeanH1OffByDefault: without Limits.Lean every request goes to
// net/http (--http1-lean=false).
func TestLeanH1OffByDefault(t *testing.T) {
	mux, _ := leanAll(okHandler())
	s, addr := startServer(t, mux, Limits{}, nil)
	if r, _, err := dial(t, addr).get("/"); err != nil || r.StatusCode != http.StatusOK {
		t.Fatal(err)
	}
	if s.h1 != nil {
		t.Fatal("a lean path without Limits.Lean")
	}
}

// TestLeanH1RequestsAtTheTimeoutAreNeverReset is
// TestRequestsAtTheTimeoutAreNeverReset on the lean path: a request that
// arrives as the idle or header timeout runs out is answered or cleanly
// closed, never reset.
func TestLeanH1RequestsAtTheTimeoutAreNeverReset(t *testing.T) {
	s, addr := startLean(t, postHandler(), Limits{IdleTimeout: raceTimeout, ReadHeaderTimeout: raceTimeout})
	requireNoResetAtTimeout(t, addr)
	if s.h1.served.Load() == 0 {
		t.Error("the lean path served none of them")
	}
}

// TestLeanH1LargeAnswerHeldUntilWritten: the lean path writes an answer
// after its handler returns; a large one stays accounted for until it is
// written. Its in-flight slot is lent (within the lent answers' bytes),
// and a turn of Turns its handler ran with is held, so a client that
// does not read keeps a later large answer waiting for a turn, and one
// that reads frees it. A small answer frees its slot at the return.
func TestLeanH1LargeAnswerHeldUntilWritten(t *testing.T) {
	const size = 32 << 20 // more than loopback's socket buffers take
	big := make([]byte, size)
	turns := NewTurns(1, 50*time.Millisecond)
	mux := http.NewServeMux()
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) { w.Write(big) })
	mux.HandleFunc("/turn", func(w http.ResponseWriter, r *http.Request) {
		turns.Serve(w, r, func(w http.ResponseWriter, r *http.Request) int { w.Write(big); return 200 }, "busy")
	})
	mux.HandleFunc("/small", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	s, addr := startLean(t, mux, Limits{MaxInflight: 4, WriteTimeout: time.Hour})
	l := s.inflight

	slow := dial(t, addr)
	if err := slow.send("/big"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return l.lent.Load() == 1 && l.lentB.Load() == size && l.n.Load() == 0 })

	holder := dial(t, addr)
	if err := holder.send("/turn"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return l.lent.Load() == 2 })
	other := dial(t, addr)
	if err := other.send("/turn"); err != nil {
		t.Fatal(err)
	}
	if r, _, err := other.answer(); err != nil || r.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a large answer while another's turn waits for its reader: %v, %v; want 503", r, err)
	}
	small := dial(t, addr)
	if r, _, err := small.get("/small"); err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("a small answer meanwhile: %v, %v", r, err)
	}
	if r, _, err := holder.answer(); err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("the holder, reading now: %v, %v", r, err)
	}
	waitFor(t, func() bool { return turns.Take(context.Background()) })
	turns.Give()
	slow.Close()
	waitFor(t, func() bool { return l.lent.Load() == 0 && l.lentB.Load() == 0 && l.n.Load() == 0 })
}

// TestLeanH1StalledLargeAnswerIsCut: a large lean HTTP/1.1 answer whose
// client makes no progress loses its connection after --stall-timeout
// when its slot was lent, after keptStall when it kept it (here: larger
// than all lent answers may be), and the slot comes back either way.
func TestLeanH1StalledLargeAnswerIsCut(t *testing.T) {
	for _, tc := range []struct {
		name string
		size int
	}{{"lent", 32 << 20}, {"kept", maxLentBytes + 1<<20}} {
		t.Run(tc.name, func(t *testing.T) {
			big := make([]byte, tc.size)
			mux := http.NewServeMux()
			mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) { w.Write(big) })
			s, addr := startLean(t, mux, Limits{MaxInflight: 4, WriteTimeout: time.Hour, StallTimeout: 300 * time.Millisecond})
			c := dial(t, addr)
			if err := c.send("/big"); err != nil {
				t.Fatal(err)
			}
			l := s.inflight
			waitFor(t, func() bool { return l.lent.Load()+l.n.Load() == 1 })
			// Not reading: the slot must come back all the same.
			waitFor(t, func() bool { return l.lent.Load() == 0 && l.lentB.Load() == 0 && l.n.Load() == 0 })
			if !c.closedByServer() {
				t.Fatal("the stalled answer's connection was not closed")
			}
		})
	}
}

// TestTurnWaitersGiveTheirSlotsBack: a request waiting for a turn gives
// its in-flight slot back meanwhile, so that requests waiting for turns
// cannot take every slot from the small ones; served once a turn frees.
func TestTurnWaitersGiveTheirSlotsBack(t *testing.T) {
	turns, mux := turnsMux()
	s, addr := startLean(t, mux, Limits{MaxInflight: 2})
	l := s.inflight
	var waiters []*rawConn
	for range 2 {
		c := dial(t, addr)
		if err := c.send("/turn"); err != nil {
			t.Fatal(err)
		}
		waiters = append(waiters, c)
	}
	waitFor(t, func() bool { return turns.waiting.Load() == 2 })
	if n := l.n.Load(); n != 0 {
		t.Fatalf("%d slots held by requests waiting for a turn", n)
	}
	if r, _, err := dial(t, addr).get("/small"); err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("a small request while both slots' requests wait for a turn: %v, %v", r, err)
	}
	turns.Give()
	for _, c := range waiters {
		if r, body, err := c.answer(); err != nil || r.StatusCode != http.StatusOK || body != "big" {
			t.Fatalf("a waiter once turns free: %v %q, %v", r, body, err)
		}
	}
}

// turnsMux serves /turn with one turn, held by the test (taken), and
// /small without one.
func turnsMux() (*Turns, *http.ServeMux) {
	turns := NewTurns(1, time.Hour)
	turns.Take(context.Background())
	mux := http.NewServeMux()
	mux.HandleFunc("/turn", func(w http.ResponseWriter, r *http.Request) {
		turns.Serve(w, r, func(w http.ResponseWriter, r *http.Request) int { io.WriteString(w, "big"); return 200 }, "busy")
	})
	mux.HandleFunc("/small", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	return turns, mux
}
