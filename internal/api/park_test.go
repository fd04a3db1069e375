package api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// parkRecorder is a parkingWriter for tests: resume runs the handler on
// a goroutine of its own, as the lean HTTP/2 server's streams do, and
// reports how the stream ended on done.
type parkRecorder struct {
	*httptest.ResponseRecorder
	parks int
	done  chan bool // true: served by run; false: ended unanswered
}

func newParkRecorder() *parkRecorder {
	return &parkRecorder{ResponseRecorder: httptest.NewRecorder(), done: make(chan bool, 1)}
}

func (p *parkRecorder) park() func(func()) {
	p.parks++
	return func(run func()) {
		if run == nil {
			p.done <- false
			return
		}
		go func() {
			run()
			p.done <- true
		}()
	}
}

// roomWithSlotHeld is a room of one in-flight slot, held by a request
// until hold is closed, and of roomSize places; its handler answers every
// other request 202.
func roomWithSlotHeld(roomSize int) (l *inflightLimiter, hold chan struct{}) {
	hold, held := make(chan struct{}), make(chan struct{})
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			close(held)
			<-hold
		}
		w.WriteHeader(http.StatusAccepted)
	})
	l = newInflightLimiter(next, 1, nil, time.Minute, roomSize)
	go l.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/hold", nil))
	<-held
	return l, hold
}

// A parked request waits as a record: its handler's goroutine returns at
// once, and the handler chain runs, on another goroutine, only once the
// room hands it the slot.
func TestParkedRequestWaitsWithoutItsGoroutine(t *testing.T) {
	l, hold := roomWithSlotHeld(10)

	pw := newParkRecorder()
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		l.ServeHTTP(pw, httptest.NewRequest("POST", "/x", nil))
	}()
	select {
	case <-returned:
	case <-time.After(hang):
		t.Fatal("the handler's goroutine stayed in the room while the request waited")
	}
	if pw.parks != 1 || l.queued.Load() != 1 {
		t.Fatalf("parks = %d, room depth = %d; want 1 and 1", pw.parks, l.queued.Load())
	}
	select {
	case <-pw.done:
		t.Fatal("the parked request ended before a slot was free")
	default:
	}
	close(hold)
	if served := <-pw.done; !served || pw.Code != http.StatusAccepted {
		t.Fatalf("served = %v, status %d; want the handler's 202 once the slot was released", served, pw.Code)
	}
	awaitCond(t, "the parked request's slot released", func() bool { return l.n.Load() == 0 })
	if got := l.outcomes[waitServed].Load(); got != 1 {
		t.Errorf("served after waiting = %d, want 1", got)
	}
}

// A parked request whose client goes away leaves the room unanswered,
// and the slot it would have had goes to the next in line.
func TestParkedRequestWhoseClientLeavesFreesItsPlace(t *testing.T) {
	l, hold := roomWithSlotHeld(10)

	ctx, cancel := context.WithCancel(context.Background())
	gone := newParkRecorder()
	l.ServeHTTP(gone, httptest.NewRequest("POST", "/gone", nil).WithContext(ctx))
	stays := newParkRecorder()
	l.ServeHTTP(stays, httptest.NewRequest("POST", "/stays", nil))
	if d := l.queued.Load(); d != 2 {
		t.Fatalf("room depth = %d, want 2", d)
	}
	cancel()
	if served := <-gone.done; served {
		t.Fatal("a request whose client left was served")
	}
	if d := l.queued.Load(); d != 1 {
		t.Fatalf("room depth = %d after the client left, want 1", d)
	}
	close(hold)
	if served := <-stays.done; !served || stays.Code != http.StatusAccepted {
		t.Fatalf("the next in line: served = %v, status %d; want 202", served, stays.Code)
	}
	if got := l.outcomes[waitClientGone].Load(); got != 1 {
		t.Errorf("client_gone = %d, want 1", got)
	}
}

// A parked request refused by a full room is answered at once, and its
// stream ends.
func TestParkedRequestRefusedWhenTheRoomIsFull(t *testing.T) {
	l, hold := roomWithSlotHeld(1)
	defer close(hold)
	l.ServeHTTP(newParkRecorder(), httptest.NewRequest("POST", "/waits", nil))
	pw := newParkRecorder()
	l.ServeHTTP(pw, httptest.NewRequest("POST", "/refused", nil))
	if served := <-pw.done; !served || pw.Code != http.StatusServiceUnavailable || pw.Header().Get("Retry-After") == "" {
		t.Fatalf("served = %v, status %d, Retry-After %q; want the room's 503 with a Retry-After", served, pw.Code, pw.Header().Get("Retry-After"))
	}
}
