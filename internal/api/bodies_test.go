package api

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The budget hands out bytes first come, first served: a request that
// does not fit waits (a later small one does not overtake it), gets its
// room when another is released, and a wait whose context ends takes
// nothing and lets the next one in.
func TestBodyBudget(t *testing.T) {
	b := NewBodyBudget(100)
	ctx := context.Background()
	r1, err := b.Acquire(ctx, 60)
	if err != nil || b.Held() != 60 {
		t.Fatalf("first: %v, held %d", err, b.Held())
	}
	got := make(chan string, 3)
	go func() {
		r, err := b.Acquire(ctx, 95) // with it held, the small one does not fit
		if err == nil {
			got <- "big"
			r()
		}
	}()
	waitFor(t, func() bool { return b.waits.Load() == 1 })
	go func() {
		r, err := b.Acquire(ctx, 10) // fits, but must not overtake the big one
		if err == nil {
			got <- "small"
			r()
		}
	}()
	waitFor(t, func() bool { return b.waits.Load() == 2 })
	select {
	case w := <-got:
		t.Fatalf("%s got room while 60 of 100 bytes were held by a request not yet answered", w)
	case <-time.After(50 * time.Millisecond):
	}
	r1()
	r1() // a second release gives nothing back twice
	if a, c := <-got, <-got; a != "big" || c != "small" {
		t.Fatalf("order %s, %s; want big, small", a, c)
	}
	waitFor(t, func() bool { return b.Held() == 0 })

	// A body larger than the budget is cut to it, so it never waits for
	// ever.
	r, err := b.Acquire(ctx, 1000)
	if err != nil || b.Held() != 100 {
		t.Fatalf("a body over the budget: %v, held %d", err, b.Held())
	}
	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { _, err := b.Acquire(cctx, 50); errc <- err }()
	waitFor(t, func() bool { b.mu.Lock(); defer b.mu.Unlock(); return len(b.waiting) == 1 })
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("a wait whose context ended got room")
	}
	r()
	if r, err := b.Acquire(ctx, 100); err != nil {
		t.Fatalf("after a cancelled wait the budget is not whole: %v", err)
	} else {
		r()
	}
}

// Many takers at once, some giving up while they wait, never hold more
// than the budget between them, every wait ends (no room given back goes
// unseen by a waiter), and the budget is whole afterwards: takers that
// meet nobody waiting take without the lock, waiters queue under it.
func TestBudgetConcurrentTakers(t *testing.T) {
	const total, takers, rounds = 100, 16, 2000
	errFull := errors.New("full")
	b := new(budget).init(total)
	var inUse, over, granted, gaveUp atomic.Int64
	var wg sync.WaitGroup
	for g := range takers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for range rounds {
				n := 1 + rng.Int64N(60)
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				if rng.IntN(8) == 0 {
					ctx, cancel = context.WithTimeout(ctx, time.Duration(rng.IntN(50))*time.Microsecond)
				}
				got, err := b.acquire(ctx, n, time.Minute, errFull)
				cancel()
				if err != nil {
					if got != 0 || errors.Is(err, errFull) {
						t.Errorf("a wait that gave up: %d bytes, %v", got, err)
					}
					gaveUp.Add(1)
					continue
				}
				if inUse.Add(got) > total {
					over.Add(1)
				}
				if rng.IntN(4) == 0 {
					runtime.Gosched()
				}
				inUse.Add(-got)
				b.release(got)
				granted.Add(1)
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * hang):
		t.Fatalf("takers still waiting after %v: a release went unseen (held %d, waiting %d)", 3*hang, b.held(), b.queued.Load())
	}
	if over.Load() != 0 {
		t.Errorf("%d times the takers held more than the budget's %d bytes", over.Load(), total)
	}
	if b.held() != 0 || b.queued.Load() != 0 || len(b.waiting) != 0 {
		t.Errorf("afterwards: held %d, queued %d, waiting %d; want all 0", b.held(), b.queued.Load(), len(b.waiting))
	}
	if p := b.peak.Load(); p > total || p == 0 {
		t.Errorf("peak %d; want 1 to %d", p, total)
	}
	if granted.Load() == 0 || b.waits.Load() == 0 {
		t.Errorf("granted %d, waited %d: the run exercised neither path", granted.Load(), b.waits.Load())
	}
	t.Logf("granted %d, gave up %d, waited %d", granted.Load(), gaveUp.Load(), b.waits.Load())
}

// A release that races a taker on its way into the queue is never lost:
// here the only bytes held are given back while the only other taker
// queues for them, again and again, so a waiter that missed them would
// wait for ever.
func TestBudgetReleaseRacesAWaiter(t *testing.T) {
	errFull := errors.New("full")
	b := new(budget).init(10)
	ctx := context.Background()
	for i := range 20000 {
		if _, err := b.acquire(ctx, 10, time.Minute, errFull); err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			_, err := b.acquire(ctx, 10, time.Minute, errFull)
			got <- err
		}()
		if i%2 == 1 {
			runtime.Gosched()
		}
		b.release(10)
		select {
		case err := <-got:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(hang):
			t.Fatalf("round %d: the bytes were given back while a taker queued, and it never got them (held %d, waiting %d)", i, b.held(), b.queued.Load())
		}
		b.release(10)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 30s")
		}
	}
}

// withBudget swaps the budget of requests served outside a Server.
func withBudget(t *testing.T, total int64) *BodyBudget {
	old := defaultBodies
	defaultBodies = NewBodyBudget(total)
	t.Cleanup(func() { defaultBodies = old })
	return defaultBodies
}

// A large JSON body waits, before it is read, until the bodies held leave
// room, and holds its bytes until its request is answered; a small one
// never waits.
func TestReadJSONWaitsForBodyRoom(t *testing.T) {
	b := withBudget(t, 1<<20)
	big := `{"s":"` + strings.Repeat("x", 700<<10) + `"}`
	entered, finish := make(chan struct{}, 2), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var v struct{ S string }
		if ReadJSON(w, r, 8<<20, &v) != 0 {
			return
		}
		entered <- struct{}{}
		<-finish
		Write(w, http.StatusOK, false, []byte("ok"))
	})
	srv := httptest.NewServer(h)
	defer srv.Close()
	post := func(body string) chan int {
		c := make(chan int, 1)
		go func() {
			resp, err := http.Post(srv.URL, "application/json", strings.NewReader(body))
			if err != nil {
				c <- 0
				return
			}
			resp.Body.Close()
			c <- resp.StatusCode
		}()
		return c
	}
	first := post(big)
	<-entered
	if b.Held() != int64(len(big)) {
		t.Fatalf("held %d while a %d-byte body is being handled", b.Held(), len(big))
	}
	second := post(big)
	waitFor(t, func() bool { return b.waits.Load() == 1 })
	small := post(`{"s":"x"}`)
	<-entered // the small one is not held up
	select {
	case <-entered:
		t.Fatal("a second large body was read with no room for it")
	case <-time.After(50 * time.Millisecond):
	}
	finish <- struct{}{}
	finish <- struct{}{}
	<-entered
	close(finish)
	for _, c := range []chan int{first, small, second} {
		if st := <-c; st != http.StatusOK {
			t.Fatalf("status %d", st)
		}
	}
	waitFor(t, func() bool { return b.Held() == 0 })
}

// A gRPC message's size is read from its envelope before its budget is
// taken, and the bytes the handler then reads are the body's, unchanged.
func TestHoldGRPCBody(t *testing.T) {
	b := withBudget(t, 1<<20)
	msg := bytes.Repeat([]byte{7}, 200<<10)
	body := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg)))
	body = append(body, msg...)
	req := httptest.NewRequest("POST", "/jq.JobService/SubmitJob", bytes.NewReader(body))
	req.ContentLength = -1
	req.Header.Set("Content-Type", "application/grpc+proto")
	ctx, cancel := context.WithCancel(context.Background())
	req = req.WithContext(ctx)
	HoldGRPCBody(req, 4<<20, true)
	got, err := io.ReadAll(req.Body)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("read %d bytes (%v), want the %d sent", len(got), err, len(body))
	}
	if b.Held() != int64(len(body)) {
		t.Fatalf("held %d for a %d-byte message", b.Held(), len(body))
	}
	cancel() // the call is answered
	waitFor(t, func() bool { return b.Held() == 0 })

	// A small first message holds nothing, whatever the protocol's limit:
	// a worker's stream lives long.
	for _, ct := range []string{"application/grpc", "application/grpc-web+proto", "application/connect+json"} {
		small := httptest.NewRequest("POST", "/jq.WorkerService/StreamJobs", bytes.NewReader([]byte{0, 0, 0, 0, 3, 1, 2, 3}))
		small.ContentLength = -1
		small.Header.Set("Content-Type", ct)
		HoldGRPCBody(small, 4<<20, true)
		if got, _ := io.ReadAll(small.Body); len(got) != 8 || b.Held() != 0 {
			t.Fatalf("%s, small message: read %d bytes, held %d", ct, len(got), b.Held())
		}
	}
}

// A compressed message holds room for what it inflates to, up to the
// limit, however small it came (gzip makes 4 MiB of a few KiB), unless
// its call is long-lived: in the envelope's flag (gRPC, gRPC-Web,
// Connect streams) and in Content-Encoding (Connect unary).
func TestHoldGRPCBodyCompressed(t *testing.T) {
	b := withBudget(t, 8<<20)
	const limit = 4 << 20
	for _, tc := range []struct {
		name     string
		body     []byte
		ct, enc  string
		length   int64
		inflated bool
		want     int64
	}{
		{"gRPC, compressed", []byte{1, 0, 0, 0, 3, 1, 2, 3}, "application/grpc", "", -1, true, 8 + limit},
		{"gRPC, compressed, long-lived", []byte{1, 0, 0, 0, 3, 1, 2, 3}, "application/grpc", "", -1, false, 0},
		{"gRPC, not compressed", []byte{0, 0, 0, 0, 3, 1, 2, 3}, "application/grpc", "", -1, true, 0},
		{"Connect unary, gzip", []byte{1, 2, 3}, "application/proto", "gzip", 3, true, 3 + limit},
		{"Connect unary, identity", []byte{1, 2, 3}, "application/proto", "identity", 3, true, 0},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		r := httptest.NewRequest("POST", "/jq.JobService/SubmitJob", bytes.NewReader(tc.body)).WithContext(ctx)
		r.ContentLength = tc.length
		r.Header.Set("Content-Type", tc.ct)
		if tc.enc != "" {
			r.Header.Set("Content-Encoding", tc.enc)
		}
		HoldGRPCBody(r, limit, tc.inflated)
		if got, err := io.ReadAll(r.Body); err != nil || !bytes.Equal(got, tc.body) {
			t.Fatalf("%s: read %x (%v), want the body sent", tc.name, got, err)
		}
		if b.Held() != tc.want {
			t.Errorf("%s: held %d, want %d", tc.name, b.Held(), tc.want)
		}
		cancel()
		waitFor(t, func() bool { return b.Held() == 0 })
	}
}

// --max-body-memory: 0 is the default; a negative size, or one too small
// to hold any counted body, is refused naming the flag.
func TestBodyMemoryLimit(t *testing.T) {
	l, err := Limits{}.Resolve()
	if err != nil || l.BodyMemory != DefaultBodyMemory {
		t.Fatalf("default: %d, %v", l.BodyMemory, err)
	}
	for _, bad := range []int64{-1, SmallBody - 1} {
		if _, err := (Limits{BodyMemory: bad}).Resolve(); err == nil || !strings.Contains(err.Error(), "--max-body-memory") {
			t.Errorf("BodyMemory %d: %v", bad, err)
		}
	}
}
