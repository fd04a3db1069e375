package api

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// An adversarial review of parked waiters (park.go, h2_park.go): every
// test ends with the room empty and every slot back.

// parkBench is a lean HTTP/2 server with lean routes POST /lean and
// POST /exempt (exempt if Limits.Exempt says so), and a holder that
// keeps the room's only slot until released.
type parkBench struct {
	s     *Server
	addr  string
	hold  chan struct{}
	held  chan struct{}
	mu    sync.Mutex
	order []string // bodies of the requests served, in the order served
}

// newParkBench serves lim (MaxInflight 1 unless set) with handle as the
// route for any body but "hold".
func newParkBench(t *testing.T, lim Limits, handle func(w http.ResponseWriter, r *http.Request, body string)) *parkBench {
	t.Helper()
	b := &parkBench{hold: make(chan struct{}), held: make(chan struct{})}
	var m Metrics
	m.lean = &LeanRoutes{}
	mux := http.NewServeMux()
	route := func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if string(body) == "hold" {
			close(b.held)
			<-b.hold
			io.WriteString(w, "held")
			return
		}
		b.mu.Lock()
		b.order = append(b.order, string(body))
		b.mu.Unlock()
		if handle != nil {
			handle(w, r, string(body))
			return
		}
		io.WriteString(w, "served")
	}
	for _, p := range []string{"POST /lean", "POST /exempt"} {
		mux.HandleFunc(p, route)
		m.lean.mark(mux, p)
	}
	lim.Lean = m.lean
	if lim.MaxInflight == 0 {
		lim.MaxInflight = 1
	}
	if lim.MaxStreams == 0 {
		lim.MaxStreams = 100
	}
	b.s, b.addr = startServer(t, mux, leanH2(lim), nil)
	return b
}

// holdSlot takes the room's slot on its own connection.
func (b *parkBench) holdSlot(t *testing.T) *rawH2 {
	t.Helper()
	c := dialH2(t, b.addr)
	c.open(t, 1, "POST", "/lean", false)
	c.fr.WriteData(1, true, []byte("hold"))
	<-b.held
	return c
}

// parkOn opens stream id on c with body and waits until the room holds
// depth requests.
func (b *parkBench) parkOn(t *testing.T, c *rawH2, id uint32, body string, depth int64) {
	t.Helper()
	c.open(t, id, "POST", "/lean", false)
	c.fr.WriteData(id, true, []byte(body))
	awaitCond(t, "stream "+body+" in the room", func() bool { return b.s.inflight.queued.Load() == depth })
}

// settled waits until no slot is taken, nobody waits and no handler runs.
func (b *parkBench) settled(t *testing.T) {
	t.Helper()
	awaitCond(t, "the room empty", func() bool { return b.s.inflight.queued.Load() == 0 })
	awaitCond(t, "every slot released", func() bool { return b.s.inflight.n.Load() == 0 })
	awaitCond(t, "no handler counted", func() bool { return leanHandlersRunning(b.s) == 0 })
}

// streamEnd is how a stream ended: its answer's status and body, or
// the reset code.
type streamEnd struct {
	status, body string
	reset        bool
	code         http2.ErrCode
}

// streamEnds reads c until each of ids has ended; frames of other
// streams are dropped.
func streamEnds(t *testing.T, c *rawH2, ids ...uint32) map[uint32]*streamEnd {
	t.Helper()
	ends := map[uint32]*streamEnd{}
	open := map[uint32]bool{}
	for _, id := range ids {
		ends[id], open[id] = &streamEnd{}, true
	}
	for len(open) > 0 {
		f := c.until(t, "the end of a stream", func(f http2.Frame) bool { return open[f.Header().StreamID] })
		id := f.Header().StreamID
		e, ended := ends[id], false
		switch f := f.(type) {
		case *http2.DataFrame:
			e.body += string(f.Data())
			ended = f.StreamEnded()
		case *http2.MetaHeadersFrame:
			e.status = f.PseudoValue("status")
			ended = f.StreamEnded()
		case *http2.RSTStreamFrame:
			e.reset, e.code, ended = true, f.ErrCode, true
		}
		if ended {
			delete(open, id)
		}
	}
	return ends
}

// A resumed handler that panics resets its stream and gives its slot
// back; the next parked request is served.
func TestParkReviewPanicInResumedHandler(t *testing.T) {
	b := newParkBench(t, Limits{}, func(w http.ResponseWriter, r *http.Request, body string) {
		if body == "panic" {
			panic("boom")
		}
		io.WriteString(w, "served")
	})
	holder := b.holdSlot(t)
	c := dialH2(t, b.addr)
	b.parkOn(t, c, 1, "panic", 1)
	b.parkOn(t, c, 3, "after", 2)
	close(b.hold)
	ends := streamEnds(t, c, 1, 3)
	if e := ends[1]; !e.reset || e.code != http2.ErrCodeInternal {
		t.Fatalf("the panicking stream: %+v; want reset INTERNAL_ERROR", e)
	}
	if e := ends[3]; e.reset || e.body != "served" {
		t.Fatalf("the next in line: %+v", e)
	}
	streamEnds(t, holder, 1)
	b.settled(t)
}

// Shutdown with parked streams sends GOAWAY, serves them once slots
// free, and returns.
func TestParkReviewShutdownServesParked(t *testing.T) {
	b := newParkBench(t, Limits{}, nil)
	holder := b.holdSlot(t)
	c := dialH2(t, b.addr)
	for i := range 3 {
		b.parkOn(t, c, uint32(1+2*i), "p", int64(i+1))
	}
	done := make(chan error, 1)
	go func() { done <- b.s.Shutdown(context.Background()) }()
	c.until(t, "GOAWAY", func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok })
	close(b.hold)
	for id, e := range streamEnds(t, c, 1, 3, 5) {
		if e.reset || e.body != "served" {
			t.Fatalf("parked stream %d: %+v", id, e)
		}
	}
	streamEnds(t, holder, 1)
	awaitNoError(t, "Shutdown, once the parked streams were served,", done)
	b.settled(t)
}

// Close with parked streams takes them out of the room.
func TestParkReviewCloseEmptiesRoom(t *testing.T) {
	b := newParkBench(t, Limits{}, nil)
	b.holdSlot(t)
	c := dialH2(t, b.addr)
	for i := range 3 {
		b.parkOn(t, c, uint32(1+2*i), "p", int64(i+1))
	}
	b.s.Close()
	awaitCond(t, "the room empty after Close", func() bool { return b.s.inflight.queued.Load() == 0 })
	close(b.hold)
	b.settled(t)
	if got := b.s.inflight.outcomes[waitServed].Load(); got != 0 {
		t.Errorf("served after Close: %d", got)
	}
}

// A parked stream whose write timeout fires is reset and leaves the room.
func TestParkReviewWriteTimeoutWhileParked(t *testing.T) {
	b := newParkBench(t, Limits{WriteTimeout: 300 * time.Millisecond}, nil)
	b.holdSlot(t)
	c := dialH2(t, b.addr)
	b.parkOn(t, c, 1, "p", 1)
	if e := streamEnds(t, c, 1)[1]; !e.reset {
		t.Fatalf("the parked stream outlived its write timeout: %+v", e)
	}
	awaitCond(t, "the room empty", func() bool { return b.s.inflight.queued.Load() == 0 })
	close(b.hold)
	b.settled(t)
}

// A full room refuses a parked stream at once with 503; nothing stays
// counted.
func TestParkReviewRefusedParked(t *testing.T) {
	b := newParkBench(t, Limits{WaitingRoom: 1}, nil)
	holder := b.holdSlot(t)
	c := dialH2(t, b.addr)
	b.parkOn(t, c, 1, "waits", 1)
	c.open(t, 3, "POST", "/lean", false)
	c.fr.WriteData(3, true, []byte("refused"))
	if e := streamEnds(t, c, 3)[3]; e.status != "503" {
		t.Fatalf("the refused stream: %+v, want 503", e)
	}
	close(b.hold)
	if e := streamEnds(t, c, 1)[1]; e.reset || e.body != "served" {
		t.Fatalf("the waiter: %+v", e)
	}
	streamEnds(t, holder, 1)
	b.settled(t)
}

// HTTP/1.1 waiters (on their goroutines) and parked HTTP/2 streams share
// one room, first come first served.
func TestParkReviewMixedFIFO(t *testing.T) {
	b := newParkBench(t, Limits{}, nil)
	b.holdSlot(t)
	c := dialH2(t, b.addr)
	var h1s []*rawConn
	want := []string{}
	for i := range 6 {
		name := string(rune('a' + i))
		want = append(want, name)
		if i%2 == 0 {
			hc := dial(t, b.addr)
			if _, err := io.WriteString(hc, "POST /lean HTTP/1.1\r\nHost: surge\r\nContent-Length: 1\r\n\r\n"+name); err != nil {
				t.Fatal(err)
			}
			awaitCond(t, "h1 "+name+" in the room", func() bool { return b.s.inflight.queued.Load() == int64(i+1) })
			h1s = append(h1s, hc)
			continue
		}
		b.parkOn(t, c, uint32(1+2*i), name, int64(i+1))
	}
	close(b.hold)
	for _, hc := range h1s {
		if _, body, err := hc.answer(); err != nil || body != "served" {
			t.Fatalf("h1 answer %q %v", body, err)
		}
	}
	b.settled(t)
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := range want {
		if i >= len(b.order) || b.order[i] != want[i] {
			t.Fatalf("served in order %v, want %v", b.order, want)
		}
	}
}

// Grants race clients' resets: whatever the interleaving, each request
// is served or ends unanswered exactly once, and the room and the slots
// come back to empty.
func TestParkReviewGrantRacesReset(t *testing.T) {
	const conns, streams = 4, 60
	b := newParkBench(t, Limits{MaxInflight: 2, WaitingRoom: 10_000}, nil)
	var served atomic.Int64
	var wg sync.WaitGroup
	for range conns {
		c := dialH2(t, b.addr)
		c.until(t, "SETTINGS", func(f http2.Frame) bool { _, ok := f.(*http2.SettingsFrame); return ok })
		wg.Add(1)
		go func() {
			defer wg.Done()
			want := map[uint32]bool{} // the streams the client keeps
			for i := range streams {
				if i%3 != 0 {
					want[uint32(1+2*i)] = true
				}
			}
			c.SetReadDeadline(time.Now().Add(hang))
			for len(want) > 0 {
				f, err := c.fr.ReadFrame()
				if err != nil {
					t.Errorf("reading: %v (%d kept streams not answered)", err, len(want))
					return
				}
				id := f.Header().StreamID
				switch f := f.(type) {
				case *http2.DataFrame:
					if f.StreamEnded() && want[id] {
						delete(want, id)
						served.Add(1)
					}
				case *http2.RSTStreamFrame:
					if want[id] {
						t.Errorf("kept stream %d reset: %v", id, f.ErrCode)
						delete(want, id)
					}
				}
			}
		}()
		for i := range streams {
			id := uint32(1 + 2*i)
			c.open(t, id, "POST", "/lean", false)
			c.fr.WriteData(id, true, []byte("x"))
			if i%3 == 0 {
				c.fr.WriteRSTStream(id, http2.ErrCodeCancel)
			}
		}
	}
	wg.Wait()
	b.settled(t)
	l := b.s.inflight
	t.Logf("served %d, client_gone %d, served after waiting %d", served.Load(), l.outcomes[waitClientGone].Load(), l.outcomes[waitServed].Load())
}

// resume(nil) races a grant on the room alone: exactly one of them ends
// each parked request, and the slot comes back.
func TestParkReviewLeaveRacesGrant(t *testing.T) {
	for range 200 {
		l, hold := roomWithSlotHeld(10)
		ctx, cancel := context.WithCancel(context.Background())
		pw := newParkRecorder()
		l.ServeHTTP(pw, httptest.NewRequest("POST", "/x", nil).WithContext(ctx))
		go cancel()
		close(hold)
		<-pw.done
		select {
		case <-pw.done:
			t.Fatal("a parked request ended twice")
		case <-time.After(time.Millisecond):
		}
		awaitCond(t, "the slot back", func() bool { return l.n.Load() == 0 && l.queued.Load() == 0 })
	}
}

// A request marked NoParking (by a gate that counts it until its
// handler returns) waits on its goroutine even behind a parkingWriter.
func TestParkReviewNoParkingWaitsOnGoroutine(t *testing.T) {
	l, hold := roomWithSlotHeld(10)
	pw := newParkRecorder()
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		l.ServeHTTP(pw, NoParking(httptest.NewRequest("POST", "/long", nil)))
	}()
	awaitCond(t, "the call in the room", func() bool { return l.queued.Load() == 1 })
	select {
	case <-returned:
		t.Fatal("the handler returned while its call waited")
	default:
	}
	close(hold)
	<-returned
	if pw.parks != 0 || pw.Code != http.StatusAccepted {
		t.Fatalf("parks %d, status %d; want 0 and 202", pw.parks, pw.Code)
	}
	awaitCond(t, "the slot back", func() bool { return l.n.Load() == 0 })
}

// A parked request that was served leaves nothing behind: its
// client-gone callback is dropped with the grant, not run (a goroutine
// and a turn on the room's lock per request) when its context ends.
func TestParkReviewServedDropsClientGoneCallback(t *testing.T) {
	l, hold := roomWithSlotHeld(10)
	ctx, cancel := context.WithCancel(context.Background())
	pw := newParkRecorder()
	l.ServeHTTP(pw, httptest.NewRequest("POST", "/x", nil).WithContext(ctx))
	close(hold)
	if served := <-pw.done; !served {
		t.Fatal("not served")
	}
	awaitCond(t, "the slot back", func() bool { return l.n.Load() == 0 })
	l.mu.Lock() // a callback left would block here, in leaveParked
	cancel()    // as the stream ends once answered
	ran := false
	for deadline := time.Now().Add(500 * time.Millisecond); !ran && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		buf := make([]byte, 1<<20)
		ran = strings.Contains(string(buf[:runtime.Stack(buf, true)]), "leaveParked")
	}
	l.mu.Unlock()
	if ran {
		t.Fatal("the served request's client-gone callback ran when its context ended")
	}
}

// An exempt path on a lean route is answered while the room is full and
// takes neither a slot nor a place: it never parks.
func TestParkReviewExemptLeanRouteNeverParks(t *testing.T) {
	b := newParkBench(t, Limits{Exempt: []string{"/exempt"}, WaitingRoom: 1}, nil)
	holder := b.holdSlot(t)
	c := dialH2(t, b.addr)
	b.parkOn(t, c, 1, "waits", 1)
	c.open(t, 3, "POST", "/exempt", false)
	c.fr.WriteData(3, true, []byte("exempt"))
	if e := streamEnds(t, c, 3)[3]; e.reset || e.body != "served" {
		t.Fatalf("the exempt request: %+v", e)
	}
	if d := b.s.inflight.queued.Load(); d != 1 {
		t.Fatalf("room depth %d, want 1 (the waiter only)", d)
	}
	close(b.hold)
	streamEnds(t, c, 1)
	streamEnds(t, holder, 1)
	b.settled(t)
}
