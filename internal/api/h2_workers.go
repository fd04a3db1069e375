package api

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Handler goroutines of the lean HTTP/2 server.
//
// A stream's handler runs on an idle handler goroutine (one that has
// grown its stack already), or a new one. Every dispatch of every
// connection used to go through one unbuffered channel that the idle
// goroutines all waited on: at GOMAXPROCS 8 that channel's lock was
// three quarters of the mutex profile's delay (the reader's send and each
// worker's select), one cache line every core wrote per request. So the
// idle goroutines are kept in shards, one per processor at start: a
// connection dispatches to its own shard (connections are spread over
// them round-robin), takes from another only when its own has none, and
// a goroutine done with a stream goes idle in the shard of that stream's
// connection, where the demand was. Each idle goroutine waits on a
// channel of its own, so a hand-off touches only the shard's lock and
// that goroutine's channel. Within a shard the goroutine idle the
// shortest is taken first: under a light load the same few run every
// stream and the rest end after h2WorkerIdle (a first-in, first-out
// channel kept every goroutine of a past burst alive by turns).

// h2Pool is the server's idle handler goroutines.
type h2Pool struct {
	shards []h2Shard
	idle   time.Duration // h2WorkerIdle; tests shorten it
	serve  func(*h2Stream)
}

// h2Shard is one shard of idle handler goroutines, a stack (a doubly
// linked list, so that one whose idle time ran out leaves in O(1)).
type h2Shard struct {
	mu     sync.Mutex
	top    *h2Worker
	closed bool
	// idle is how many goroutines are on the stack, written under mu,
	// read without it by a dispatch looking for one to take: on many
	// shards, trying each one's lock would move every lock's cache line.
	idle atomic.Int32
	// The shards are written by different cores; padding keeps each
	// lock on a cache line of its own.
	_ [64]byte
}

// h2Worker is an idle handler goroutine's place in a shard.
type h2Worker struct {
	wake       chan *h2Stream // a stream to run; nil at the pool's close
	prev, next *h2Worker
	in         *h2Shard // the shard it is idle in; nil while it runs
}

func newH2Pool(serve func(*h2Stream)) *h2Pool {
	return &h2Pool{shards: make([]h2Shard, max(1, runtime.GOMAXPROCS(0))), idle: h2WorkerIdle, serve: serve}
}

// shard is the shard of the i-th connection.
func (p *h2Pool) shard(i uint64) *h2Shard { return &p.shards[i%uint64(len(p.shards))] }

// run runs st on an idle goroutine of home, else of another shard, else
// on a new one.
func (p *h2Pool) run(home *h2Shard, st *h2Stream) {
	w := home.pop(false)
	for i := 0; w == nil && i < len(p.shards); i++ {
		if s := &p.shards[i]; s != home && s.idle.Load() > 0 {
			w = s.pop(true)
		}
	}
	if w != nil {
		w.wake <- st // buffered: its owner waits on it, or is about to
		return
	}
	go p.worker(st, home)
}

// worker runs streams until none comes for p.idle or the pool closes.
func (p *h2Pool) worker(st *h2Stream, home *h2Shard) {
	w := &h2Worker{wake: make(chan *h2Stream, 1)}
	var idle *time.Timer
	for st != nil {
		p.serve(st)
		if !home.push(w) {
			return
		}
		if idle == nil {
			idle = time.NewTimer(p.idle)
		} else {
			idle.Reset(p.idle)
		}
		select {
		case st = <-w.wake:
		case <-idle.C:
			if home.remove(w) {
				return
			}
			st = <-w.wake // taken as its time ran out: the stream is on its way
		}
		if st != nil {
			home = st.c.shard
		}
	}
}

// pop takes the goroutine idle the shortest, if any; try gives up if
// the shard is busy.
func (s *h2Shard) pop(try bool) *h2Worker {
	if try {
		if !s.mu.TryLock() {
			return nil
		}
	} else {
		s.mu.Lock()
	}
	w := s.top
	if w != nil {
		s.unlinkLocked(w)
	}
	s.mu.Unlock()
	return w
}

// push makes w idle in s; false once the pool is closed.
func (s *h2Shard) push(w *h2Worker) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	w.in, w.prev, w.next = s, nil, s.top
	if s.top != nil {
		s.top.prev = w
	}
	s.top = w
	s.idle.Add(1)
	return true
}

// remove takes w out of s, unless a dispatch took it first.
func (s *h2Shard) remove(w *h2Worker) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.in != s {
		return false
	}
	s.unlinkLocked(w)
	return true
}

func (s *h2Shard) unlinkLocked(w *h2Worker) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		s.top = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	}
	w.in, w.prev, w.next = nil, nil, nil
	s.idle.Add(-1)
}

// close ends the idle goroutines; the ones running end after their
// stream, and streams dispatched from now on run on goroutines of their
// own.
func (p *h2Pool) close() {
	for i := range p.shards {
		s := &p.shards[i]
		s.mu.Lock()
		s.closed = true
		for s.top != nil {
			w := s.top
			s.unlinkLocked(w)
			w.wake <- nil
		}
		s.mu.Unlock()
	}
}
