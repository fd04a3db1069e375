// Package waiters is the registry of clients waiting on a key (an order
// to end, a group to gain messages) for the engine's notes to wake them:
// the long polls and streams of the HTTP and gRPC APIs.
//
// A waiter registers before its client reads the state it waits on, so a
// note between the read and the wait is not missed. The registry holds at
// most its cap of waiters over all keys (--max-waiters): past it a stream
// is refused, with a pause that gives it its own turn for a freed place
// (api.SlotRetry), and a long poll still waits, unregistered (see
// Waiter.Overflow).
package waiters

import (
	"context"
	"sync"
	"time"

	"github.com/surge-run/surge/internal/api"
)

// Registry holds waiters by key; N is what a note hands a waiter.
type Registry[K comparable, N any] struct {
	mu     sync.Mutex
	max, n int
	sets   map[K]map[*Waiter[N]]struct{}
	retry  api.SlotRetry
}

// Waiter is one long poll or stream. Its channel holds one note: a note
// that finds it full is dropped, as the waiter has one to act on already
// and looks at the state afresh.
type Waiter[N any] struct {
	ch chan N
	// overflow: a long poll past the cap, in no set, so no note wakes it:
	// it looks again every api.OverflowRecheck until its wait passes. A
	// long poll is answered within its wait either way, as its client
	// expects, instead of a refusal that its retry loop would turn into a
	// storm of polls.
	overflow bool
}

// New returns a registry for at most max waiters at once; max must be
// positive (callers apply their default first).
func New[K comparable, N any](max int) *Registry[K, N] {
	if max <= 0 {
		panic("waiters: a registry needs a positive cap")
	}
	return &Registry[K, N]{max: max, sets: map[K]map[*Waiter[N]]struct{}{}}
}

// Max is the cap.
func (r *Registry[K, N]) Max() int { return r.max }

// Waiting is how many waiters are registered (overflow waiters are not).
func (r *Registry[K, N]) Waiting() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// AddPoll registers a long poll on key; past the cap it returns an
// overflow waiter, which no note wakes.
func (r *Registry[K, N]) AddPoll(key K) *Waiter[N] {
	w := &Waiter[N]{ch: make(chan N, 1)}
	if !r.add(key, w) {
		w.overflow = true
	}
	return w
}

// AddStream registers a stream on key; past the cap it returns nil, and
// the caller refuses the stream for RefusedWait.
func (r *Registry[K, N]) AddStream(key K) *Waiter[N] {
	w := &Waiter[N]{ch: make(chan N, 1)}
	if !r.add(key, w) {
		return nil
	}
	return w
}

func (r *Registry[K, N]) add(key K, w *Waiter[N]) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n >= r.max {
		return false
	}
	s := r.sets[key]
	if s == nil {
		s = map[*Waiter[N]]struct{}{}
		r.sets[key] = s
	}
	s[w] = struct{}{}
	r.n++
	return true
}

// Remove unregisters w from key; an overflow waiter or nil is a no-op.
func (r *Registry[K, N]) Remove(key K, w *Waiter[N]) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.sets[key]
	if _, ok := s[w]; !ok {
		return
	}
	delete(s, w)
	if len(s) == 0 {
		delete(r.sets, key)
	}
	r.n--
	r.retry.Released()
}

// RefusedWait is the pause a refused stream's client is given: its own
// turn for a freed place.
func (r *Registry[K, N]) RefusedWait() time.Duration { return r.retry.Refused() }

// Wake hands note to every waiter on key. It never blocks: it runs on
// the log's completion goroutine.
func (r *Registry[K, N]) Wake(key K, note N) { r.WakeN(key, note, -1) }

// WakeN hands note to at most n waiters on key (n < 0: all of them).
func (r *Registry[K, N]) WakeN(key K, note N, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for w := range r.sets[key] {
		if n == 0 {
			return
		}
		w.offer(note)
		n--
	}
}

func (w *Waiter[N]) offer(note N) {
	select {
	case w.ch <- note:
	default: // it has a note to act on already
	}
}

// C delivers the waiter's notes.
func (w *Waiter[N]) C() <-chan N { return w.ch }

// Overflow reports whether w is a long poll past the cap, which no note
// wakes.
func (w *Waiter[N]) Overflow() bool { return w.overflow }

// Wait waits for a note, at most d; an overflow waiter waits at most
// api.OverflowRecheck, then says to look again. It reports whether the
// caller should look at the state again (a note, or an overflow waiter's
// recheck): false when d passed, ctx ended or done was closed.
func (w *Waiter[N]) Wait(ctx context.Context, done <-chan struct{}, d time.Duration) bool {
	recheck := w.overflow && d > api.OverflowRecheck
	if recheck {
		d = api.OverflowRecheck
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-w.ch:
		return true
	case <-t.C:
		return recheck
	case <-ctx.Done():
	case <-done:
	}
	return false
}
