package waiters

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/surge-run/surge/internal/api"
)

// TestCapHolds drives a registry with random adds and removes over a few
// keys and checks it against a count: never more than the cap
// registered, a stream past the cap refused, a poll past it an overflow
// waiter that removing leaves the count as it was.
func TestCapHolds(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 1))
		max := 1 + rng.IntN(8)
		r := New[int, string](max)
		type reg struct {
			key int
			w   *Waiter[string]
		}
		var live []reg
		for step := range 2000 {
			key := rng.IntN(4)
			switch op := rng.IntN(3); {
			case op == 0 && rng.IntN(2) == 0:
				w := r.AddStream(key)
				if (w == nil) != (len(live) >= max) {
					t.Fatalf("seed %d step %d: stream with %d of %d registered: %v", seed, step, len(live), max, w)
				}
				if w != nil {
					live = append(live, reg{key, w})
				}
			case op == 0:
				w := r.AddPoll(key)
				if w.Overflow() != (len(live) >= max) {
					t.Fatalf("seed %d step %d: poll with %d of %d registered: overflow %v", seed, step, len(live), max, w.Overflow())
				}
				if w.Overflow() {
					r.Remove(key, w)
				} else {
					live = append(live, reg{key, w})
				}
			case op == 1 && len(live) > 0:
				i := rng.IntN(len(live))
				r.Remove(live[i].key, live[i].w)
				r.Remove(live[i].key, live[i].w) // twice: a no-op
				live = append(live[:i], live[i+1:]...)
			case op == 2:
				r.Remove(key, nil)
				if len(live) > 0 {
					r.Remove(live[0].key+100, live[0].w) // under another key: a no-op
				}
			}
			if r.Waiting() != len(live) {
				t.Fatalf("seed %d step %d: Waiting %d, %d registered", seed, step, r.Waiting(), len(live))
			}
		}
	}
}

// TestWakeReachesTheKeysWaiters: a note reaches every waiter of its key
// (WakeN at most n of them), none of another key, never an overflow
// waiter, and a waiter holds one note without blocking the waker.
func TestWakeReachesTheKeysWaiters(t *testing.T) {
	r := New[string, int](5)
	a1, a2, a3, b := r.AddPoll("a"), r.AddPoll("a"), r.AddStream("a"), r.AddPoll("b")
	r.AddPoll("c")
	over := r.AddPoll("a")
	if !over.Overflow() {
		t.Fatal("the sixth waiter of five is registered")
	}
	r.Wake("a", 1)
	r.Wake("a", 2) // finds every channel full: dropped, not blocking
	for _, w := range []*Waiter[int]{a1, a2, a3} {
		if got := <-w.C(); got != 1 {
			t.Fatalf("got note %d, want the first", got)
		}
	}
	select {
	case n := <-b.C():
		t.Fatalf("a waiter of b got %d", n)
	case n := <-over.C():
		t.Fatalf("an overflow waiter got %d", n)
	default:
	}
	r.WakeN("a", 3, 2)
	r.WakeN("a", 4, 0)
	got := 0
	for _, w := range []*Waiter[int]{a1, a2, a3} {
		select {
		case n := <-w.C():
			if n != 3 {
				t.Fatalf("WakeN delivered %d", n)
			}
			got++
		default:
		}
	}
	if got != 2 {
		t.Fatalf("WakeN(2) woke %d waiters", got)
	}
}

func TestWait(t *testing.T) {
	ctx := context.Background()
	r := New[int, struct{}](1)
	w := r.AddPoll(0)
	r.Wake(0, struct{}{})
	if !w.Wait(ctx, nil, time.Hour) {
		t.Fatal("a woken waiter does not look again")
	}
	if w.Wait(ctx, nil, time.Millisecond) {
		t.Fatal("a wait that passed says to look again")
	}
	done := make(chan struct{})
	close(done)
	if w.Wait(ctx, done, time.Hour) {
		t.Fatal("a closing server says to look again")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if w.Wait(cctx, nil, time.Hour) {
		t.Fatal("a gone client says to look again")
	}
	over := r.AddPoll(0)
	start := time.Now()
	if !over.Wait(ctx, nil, time.Hour) || time.Since(start) < api.OverflowRecheck {
		t.Fatal("an overflow waiter does not look again after api.OverflowRecheck")
	}
	if over.Wait(ctx, nil, time.Millisecond) {
		t.Fatal("an overflow waiter whose wait passed says to look again")
	}
}

// TestConcurrentUse: waiters come and go while notes arrive (run with
// -race); at the end nothing is left registered.
func TestConcurrentUse(t *testing.T) {
	r := New[int, int](16)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
				r.WakeN(i%4, i, 3)
			}
		}
	})
	var clients sync.WaitGroup
	for g := range 8 {
		clients.Go(func() {
			for i := range 500 {
				key := (g + i) % 4
				w := r.AddStream(key)
				if w == nil {
					r.RefusedWait()
					continue
				}
				select {
				case <-w.C():
				default:
				}
				r.Remove(key, w)
			}
		})
	}
	clients.Wait()
	close(stop)
	wg.Wait()
	if n := r.Waiting(); n != 0 {
		t.Fatalf("%d waiters left registered", n)
	}
}
