package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// orderHandler blocks every /block request until the test releases one,
// and records the order in which requests reached it.
type orderHandler struct {
	mu      sync.Mutex
	order   []string
	entered chan struct{}
	release chan struct{}
}

func newOrderHandler() *orderHandler {
	return &orderHandler{entered: make(chan struct{}, 100), release: make(chan struct{})}
}

func (h *orderHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/block" {
		h.mu.Lock()
		h.order = append(h.order, r.URL.Query().Get("i"))
		h.mu.Unlock()
		h.entered <- struct{}{}
		<-h.release
	}
	io.WriteString(w, "ok\n")
}

// waitFor polls cond until it holds, or fails the test after hang.
func awaitCond(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(hang)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// awaitNoError waits for done's error, failing the test with it, or
// with "<what> did not return" after hang.
func awaitNoError(t *testing.T, what string, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(hang):
		t.Fatal(what + " did not return")
	}
}

func waitingOutcome(t *testing.T, reg *prometheus.Registry, outcome string) float64 {
	t.Helper()
	v, ok := counterWith(t, reg, "surge_http_waiting_total", "outcome="+outcome)
	if !ok {
		t.Fatalf("surge_http_waiting_total{outcome=%q} not registered", outcome)
	}
	return v
}

type blockResult struct {
	i      int
	status int
	after  string
	body   string
	err    error
}

// send starts GET /block?i=i and delivers its answer on out.
func sendBlock(ctx context.Context, base string, i int, out chan<- blockResult) {
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/block?i="+strconv.Itoa(i), nil)
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			out <- blockResult{i: i, err: err}
			return
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		out <- blockResult{i: i, status: r.StatusCode, after: r.Header.Get("Retry-After"), body: string(b)}
	}()
}

// TestWaitingRoomServesBurstInOrder: past --max-inflight a burst waits
// for slots instead of being refused, and is served in arrival order.
func TestWaitingRoomServesBurstInOrder(t *testing.T) {
	const burst = 20
	h := newOrderHandler()
	reg := prometheus.NewRegistry()
	s, addr := startServer(t, h, Limits{MaxInflight: 2, Exempt: []string{"/healthz"}}, reg)
	base := "http://" + addr
	out := make(chan blockResult, burst)
	for i := range burst {
		sendBlock(context.Background(), base, i, out)
		// One at a time, so that the arrival order is known.
		if i < 2 {
			awaitCond(t, "request "+strconv.Itoa(i)+" in the handler", func() bool { return len(h.entered) == i+1 })
		} else {
			awaitCond(t, "request "+strconv.Itoa(i)+" in the room", func() bool { return s.inflight.queued.Load() == int64(i-1) })
		}
	}
	if r, err := http.Get(base + "/healthz"); err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("exempt /healthz with a full house: %v %v", r, err)
	} else {
		r.Body.Close()
	}
	if got := metric(t, reg, "surge_http_waiting_requests"); got != burst-2 {
		t.Errorf("surge_http_waiting_requests = %v, want %d", got, burst-2)
	}
	// One slot at a time, so that the order the handler sees is the
	// order slots were handed out.
	answered := 0
	check := func(r blockResult) {
		t.Helper()
		if r.err != nil || r.status != http.StatusOK {
			t.Fatalf("request %d: %v %d %q", r.i, r.err, r.status, r.body)
		}
		answered++
	}
	next := func(what string) {
		t.Helper()
		for {
			select {
			case <-h.entered:
				return
			case r := <-out:
				check(r)
			case <-time.After(hang):
				t.Fatalf("waiting for %s: timed out", what)
			}
		}
	}
	next("the first request")
	next("the second request")
	for k := range burst {
		// Spread over more than one estimation window (slotWindow).
		time.Sleep(time.Millisecond)
		h.release <- struct{}{}
		if k < burst-2 {
			next("request " + strconv.Itoa(k+2))
		}
	}
	for answered < burst {
		check(<-out)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, got := range h.order {
		if got != strconv.Itoa(i) {
			t.Fatalf("served in the order %v; want arrival order", h.order)
		}
	}
	if got := waitingOutcome(t, reg, "served"); got != burst-2 {
		t.Errorf("surge_http_waiting_total{outcome=served} = %v, want %d", got, burst-2)
	}
	if got := metric(t, reg, "surge_http_requests_refused_total"); got != 0 {
		t.Errorf("surge_http_requests_refused_total = %v, want 0", got)
	}
	if got := s.inflight.slotNs.Load(); got <= 0 {
		t.Errorf("time per slot release not learnt from %d grants: %d ns", burst-2, got)
	}
}

// checkWaitRefusal checks a 503 whose Retry-After is the predicted wait.
func checkWaitRefusal(t *testing.T, what string, r blockResult, wantAfter int, want string) {
	t.Helper()
	if r.err != nil || r.status != http.StatusServiceUnavailable || r.after != strconv.Itoa(wantAfter) {
		t.Fatalf("%s: %v %d, Retry-After %q; want 503, %d", what, r.err, r.status, r.after, wantAfter)
	}
	var e struct{ Error string }
	if err := json.Unmarshal([]byte(r.body), &e); err != nil || !strings.Contains(e.Error, want) {
		t.Fatalf("%s: body %q; want a JSON error containing %q", what, r.body, want)
	}
}

// checkTicket is checkWaitRefusal for a full room's ticket: counted from
// an earlier refusal, it has shrunk by the time since (well under the
// slack, even on a loaded machine).
func checkTicket(t *testing.T, what string, r blockResult, want int, body string) {
	t.Helper()
	const slack = 3
	got, err := strconv.Atoi(r.after)
	if r.err != nil || r.status != http.StatusServiceUnavailable || err != nil || got > want || got < want-slack {
		t.Fatalf("%s: %v %d, Retry-After %q; want 503, %d (at most %d s less)", what, r.err, r.status, r.after, want, slack)
	}
	checkWaitRefusal(t, what, blockResult{status: r.status, after: r.after, body: r.body}, got, body)
}

// TestWaitingRoomRefusesBeyondPatience: a request whose predicted wait
// (place in the room × time per slot release) is beyond --max-wait is
// refused at once, with that wait as Retry-After; those within it wait.
func TestWaitingRoomRefusesBeyondPatience(t *testing.T) {
	h := newOrderHandler()
	reg := prometheus.NewRegistry()
	s, addr := startServer(t, h, Limits{MaxInflight: 1, MaxWait: 2 * time.Second}, reg)
	// As if slots had been freed every 1.5 s: the first waiter expects
	// 1.5 s (within 2 s), the second 3 s.
	s.inflight.fastNs.Store(int64(1500 * time.Millisecond))
	s.inflight.grants = 1 << 20 // learnt, and trusted
	base := "http://" + addr
	out := make(chan blockResult, 3)
	sendBlock(context.Background(), base, 0, out)
	awaitCond(t, "the first request in the handler", func() bool { return len(h.entered) == 1 })
	sendBlock(context.Background(), base, 1, out)
	awaitCond(t, "a waiter", func() bool { return s.inflight.queued.Load() == 1 })
	sendBlock(context.Background(), base, 2, out)
	checkWaitRefusal(t, "the second waiter", <-out, 3, "beyond its patience of 2.0 s (--max-wait)")
	if got := waitingOutcome(t, reg, "refused_patience"); got != 1 {
		t.Errorf("surge_http_waiting_total{outcome=refused_patience} = %v, want 1", got)
	}
	if got := metric(t, reg, "surge_http_waiting_predicted_seconds"); got != 3 {
		t.Errorf("surge_http_waiting_predicted_seconds = %v, want 3", got)
	}
	h.release <- struct{}{}
	h.release <- struct{}{}
	for range 2 {
		if r := <-out; r.err != nil || r.status != http.StatusOK {
			t.Fatalf("request %d within the patience: %v %d %q", r.i, r.err, r.status, r.body)
		}
	}
}

// TestWaitingRoomFull: past --waiting-room waiters a request is refused
// with a ticket: Retry-After = when the room will be half drained, plus
// one slot release per ticket already given, so the refused come back
// spread at the rate the room drains, not in one wave.
func TestWaitingRoomFull(t *testing.T) {
	h := newOrderHandler()
	reg := prometheus.NewRegistry()
	s, addr := startServer(t, h, Limits{MaxInflight: 1, WaitingRoom: 2, MaxWait: time.Hour}, reg)
	s.inflight.fastNs.Store(int64(10 * time.Second))
	s.inflight.grants = 1 << 20 // learnt, and trusted
	base := "http://" + addr
	out := make(chan blockResult, 6)
	sendBlock(context.Background(), base, 0, out)
	awaitCond(t, "the first request in the handler", func() bool { return len(h.entered) == 1 })
	for i := 1; i <= 2; i++ {
		sendBlock(context.Background(), base, i, out)
		awaitCond(t, "waiter "+strconv.Itoa(i), func() bool { return s.inflight.queued.Load() == int64(i) })
	}
	// The room (2) is half drained in one release (10 s); the first
	// ticket is one release after that, each next one a release later.
	for i, want := range []int{20, 30, 40} {
		sendBlock(context.Background(), base, 3+i, out)
		checkTicket(t, "past a full room", <-out, want, "waiting room is full (2 requests wait")
	}
	if got := waitingOutcome(t, reg, "refused_full"); got != 3 {
		t.Errorf("surge_http_waiting_total{outcome=refused_full} = %v, want 3", got)
	}
	if got := metric(t, reg, "surge_http_requests_refused_total"); got != 3 {
		t.Errorf("surge_http_requests_refused_total = %v, want 3", got)
	}
	if got := metric(t, reg, "surge_http_waiting_virtual_requests"); got != 3 {
		t.Errorf("surge_http_waiting_virtual_requests = %v, want 3 (tickets not yet due)", got)
	}
	for range 3 {
		h.release <- struct{}{}
	}
	for range 3 {
		if r := <-out; r.err != nil || r.status != http.StatusOK {
			t.Fatalf("request %d: %v %d %q", r.i, r.err, r.status, r.body)
		}
	}
}

// TestFullRoomTicketsBeforeAnyMeasurement: a crowd that fills the room
// before any slot was handed over still gets spread tickets (from the
// cold guess of the time per release), not the patience for everyone.
func TestFullRoomTicketsBeforeAnyMeasurement(t *testing.T) {
	h := newOrderHandler()
	reg := prometheus.NewRegistry()
	s, addr := startServer(t, h, Limits{MaxInflight: 1, WaitingRoom: 1, MaxWait: time.Hour}, reg)
	s.inflight.coldSlotNs = int64(5 * time.Second)
	base := "http://" + addr
	out := make(chan blockResult, 4)
	sendBlock(context.Background(), base, 0, out)
	awaitCond(t, "the first request in the handler", func() bool { return len(h.entered) == 1 })
	sendBlock(context.Background(), base, 1, out)
	awaitCond(t, "a waiter", func() bool { return s.inflight.queued.Load() == 1 })
	// Half of a room of 1 is 0: the room is "half drained" after one
	// release (5 s), and the tickets follow one release apart.
	for i, want := range []int{10, 15} {
		sendBlock(context.Background(), base, 2+i, out)
		checkTicket(t, "past a full room, cold", <-out, want, "waiting room is full (1 requests wait")
	}
	for range 2 {
		h.release <- struct{}{}
	}
	for range 2 {
		if r := <-out; r.err != nil || r.status != http.StatusOK {
			t.Fatalf("request %d: %v %d %q", r.i, r.err, r.status, r.body)
		}
	}
}

// TestWaiterWhoLeavesFreesItsPlace: a waiter whose client goes away
// leaves the room, is never handled, and the next in line gets the slot.
func TestWaiterWhoLeavesFreesItsPlace(t *testing.T) {
	h := newOrderHandler()
	reg := prometheus.NewRegistry()
	s, addr := startServer(t, h, Limits{MaxInflight: 1}, reg)
	base := "http://" + addr
	out := make(chan blockResult, 3)
	sendBlock(context.Background(), base, 0, out)
	awaitCond(t, "the first request in the handler", func() bool { return len(h.entered) == 1 })
	ctx, cancel := context.WithCancel(context.Background())
	sendBlock(ctx, base, 1, out)
	awaitCond(t, "the leaving waiter", func() bool { return s.inflight.queued.Load() == 1 })
	sendBlock(context.Background(), base, 2, out)
	awaitCond(t, "the next waiter", func() bool { return s.inflight.queued.Load() == 2 })
	cancel()
	if r := <-out; r.i != 1 || !errors.Is(r.err, context.Canceled) {
		t.Fatalf("the cancelled request: %+v", r)
	}
	awaitCond(t, "the cancelled waiter to leave", func() bool { return s.inflight.queued.Load() == 1 })
	if got := waitingOutcome(t, reg, "client_gone"); got != 1 {
		t.Errorf("surge_http_waiting_total{outcome=client_gone} = %v, want 1", got)
	}
	h.release <- struct{}{}
	h.release <- struct{}{}
	for range 2 {
		if r := <-out; r.err != nil || r.status != http.StatusOK {
			t.Fatalf("request %d: %v %d %q", r.i, r.err, r.status, r.body)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if strings.Join(h.order, ",") != "0,2" {
		t.Fatalf("handled %v; want 0,2 (the request that left never handled)", h.order)
	}
	if n := s.inflight.n.Load(); n != 0 {
		t.Fatalf("%d slots still taken after every request ended", n)
	}
}

func TestRetryAfterSeconds(t *testing.T) {
	for d, want := range map[time.Duration]int{0: 1, time.Millisecond: 1, time.Second: 1, 1001 * time.Millisecond: 2, 9500 * time.Millisecond: 10} {
		if got := RetryAfterSeconds(d); got != want {
			t.Errorf("RetryAfterSeconds(%v) = %d, want %d", d, got, want)
		}
	}
}

// TestColdServerDoesNotJudgePatience: until a full room's worth of slots
// has been handed over, a predicted wait beyond the patience does not
// refuse (a cold server's first measurements are its warm-up): the
// request waits and is served.
func TestColdServerDoesNotJudgePatience(t *testing.T) {
	h := newOrderHandler()
	reg := prometheus.NewRegistry()
	s, addr := startServer(t, h, Limits{MaxInflight: 1, WaitingRoom: 10, MaxWait: time.Nanosecond}, reg)
	s.inflight.fastNs.Store(int64(time.Second)) // measured, but not yet trusted
	base := "http://" + addr
	// Every slot (one) has turned over, the room's worth (10) not.
	s.inflight.grants = 1
	out := make(chan blockResult, 2)
	sendBlock(context.Background(), base, 0, out)
	awaitCond(t, "the first request in the handler", func() bool { return len(h.entered) == 1 })
	sendBlock(context.Background(), base, 1, out)
	awaitCond(t, "a waiter", func() bool { return s.inflight.queued.Load() == 1 })
	h.release <- struct{}{}
	h.release <- struct{}{}
	for range 2 {
		if r := <-out; r.err != nil || r.status != http.StatusOK {
			t.Fatalf("request %d: %v %d %q", r.i, r.err, r.status, r.body)
		}
	}
	if got := waitingOutcome(t, reg, "refused_patience"); got != 0 {
		t.Errorf("surge_http_waiting_total{outcome=refused_patience} = %v, want 0", got)
	}
}

// TestFullRoomTicketsStopAtThePatience: however long the line behind a
// full room, nobody is told to come back later than the patience (the
// measured rate can be far too slow while a crowd arrives).
func TestFullRoomTicketsStopAtThePatience(t *testing.T) {
	h := newOrderHandler()
	reg := prometheus.NewRegistry()
	s, addr := startServer(t, h, Limits{MaxInflight: 1, WaitingRoom: 1, MaxWait: 25 * time.Second}, reg)
	s.inflight.fastNs.Store(int64(10 * time.Second))
	base := "http://" + addr
	out := make(chan blockResult, 5)
	sendBlock(context.Background(), base, 0, out)
	awaitCond(t, "the first request in the handler", func() bool { return len(h.entered) == 1 })
	sendBlock(context.Background(), base, 1, out)
	awaitCond(t, "a waiter", func() bool { return s.inflight.queued.Load() == 1 })
	// Tickets at 20 s, then 30 s and 40 s, which are past the patience.
	for i, want := range []int{20, 25, 25} {
		sendBlock(context.Background(), base, 2+i, out)
		checkTicket(t, "past a full room", <-out, want, "waiting room is full")
	}
	for range 2 {
		h.release <- struct{}{}
	}
	for range 2 {
		if r := <-out; r.err != nil || r.status != http.StatusOK {
			t.Fatalf("request %d: %v %d %q", r.i, r.err, r.status, r.body)
		}
	}
}
