package api

import (
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// h2Workers counts the lean HTTP/2 server's handler goroutines, idle or
// running, in every Server of the test binary.
func h2Workers() int {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "internal/api.(*h2") && strings.Contains(g, ").worker(") {
			n++
		}
	}
	return n
}

// TestH2BurstWorkersEndUnderTrickle: after a burst of concurrent
// handlers, a trickle of one request at a time runs on the same few
// handler goroutines, and the rest of the burst's end after
// h2WorkerIdle. A first-in, first-out hand-off ran the trickle on every
// one of them by turns, so none was ever idle that long.
func TestH2BurstWorkersEndUnderTrickle(t *testing.T) {
	const burst = 20
	var block atomic.Bool
	block.Store(true)
	entered := make(chan struct{}, burst)
	release := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if block.Load() {
			entered <- struct{}{}
			<-release
		}
		io.WriteString(w, "ok")
	})
	_, addr := startServer(t, h, leanH2(Limits{}), nil)
	cl := xh2Client()
	get := func() {
		res, err := cl.Get("http://" + addr + "/")
		if err != nil {
			t.Error(err)
			return
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	base := h2Workers()
	var wg sync.WaitGroup
	for range burst {
		wg.Go(get)
	}
	for range burst {
		<-entered
	}
	block.Store(false)
	close(release)
	wg.Wait()
	if n := h2Workers() - base; n < burst {
		t.Fatalf("%d handler goroutines for a burst of %d", n, burst)
	}
	// Each of the burst's goroutines would get a stream every
	// burst × 10 ms, well within h2WorkerIdle.
	for end := time.Now().Add(3 * h2WorkerIdle); time.Now().Before(end); {
		get()
		time.Sleep(10 * time.Millisecond)
	}
	if n := h2Workers() - base; n > burst/4 {
		t.Fatalf("%d handler goroutines left of a burst of %d under a trickle of one request at a time, want at most %d", n, burst, burst/4)
	}
}

// testPool is a pool of n shards whose goroutines idle for idle, and
// streams on conns connections spread over them.
func testPool(n int, idle time.Duration, serve func(*h2Stream), conns int) (*h2Pool, []*h2Conn) {
	p := &h2Pool{shards: make([]h2Shard, n), idle: idle, serve: serve}
	cs := make([]*h2Conn, conns)
	for i := range cs {
		cs[i] = &h2Conn{shard: p.shard(uint64(i))}
	}
	return p, cs
}

// TestH2PoolRunsEveryStreamOnce: streams dispatched from many
// connections at once, while idle goroutines time out and the pool
// closes, each run exactly once.
func TestH2PoolRunsEveryStreamOnce(t *testing.T) {
	const conns, per = 8, 2000
	var mu sync.Mutex
	ran := map[*h2Stream]int{}
	var done sync.WaitGroup
	serve := func(st *h2Stream) {
		mu.Lock()
		ran[st]++
		mu.Unlock()
		done.Done()
	}
	p, cs := testPool(4, time.Microsecond, serve, conns)
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Go(func() {
			for j := range per {
				done.Add(1)
				p.run(c.shard, &h2Stream{c: c})
				if i == 0 && j == per/2 {
					p.close()
				}
			}
		})
	}
	wg.Wait()
	waitGroupWithin(t, &done, hang)
	if len(ran) != conns*per {
		t.Fatalf("%d streams ran, want %d", len(ran), conns*per)
	}
	for _, n := range ran {
		if n != 1 {
			t.Fatalf("a stream ran %d times", n)
		}
	}
}

func waitGroupWithin(t *testing.T, wg *sync.WaitGroup, d time.Duration) {
	t.Helper()
	ch := make(chan struct{})
	go func() { wg.Wait(); close(ch) }()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatal("streams still not run")
	}
}

// TestH2PoolStealsAndFollowsDemand: a connection whose shard has no idle
// goroutine takes another shard's rather than starting one, and that
// goroutine then idles in the shard of the stream it ran.
func TestH2PoolStealsAndFollowsDemand(t *testing.T) {
	ran := make(chan *h2Stream, 1)
	p, cs := testPool(2, hang, func(st *h2Stream) { ran <- st }, 2)
	defer p.close()
	idleIn := func(s *h2Shard) int {
		s.mu.Lock()
		defer s.mu.Unlock()
		n := 0
		for w := s.top; w != nil; w = w.next {
			n++
		}
		return n
	}
	waitIdle := func(s *h2Shard) {
		for end := time.Now().Add(hang); idleIn(s) == 0; time.Sleep(time.Millisecond) {
			if time.Now().After(end) {
				t.Fatal("no goroutine went idle")
			}
		}
	}
	p.run(cs[0].shard, &h2Stream{c: cs[0]})
	<-ran
	waitIdle(cs[0].shard)
	p.run(cs[1].shard, &h2Stream{c: cs[1]})
	<-ran
	waitIdle(cs[1].shard)
	if a, b := idleIn(cs[0].shard), idleIn(cs[1].shard); a != 0 || b != 1 {
		t.Fatalf("idle goroutines per shard %d, %d; want 0, 1 (the one goroutine, now in the shard it served)", a, b)
	}
	if a, b := cs[0].shard.idle.Load(), cs[1].shard.idle.Load(); a != 0 || b != 1 {
		t.Fatalf("idle counts %d, %d; want 0, 1", a, b)
	}
}
