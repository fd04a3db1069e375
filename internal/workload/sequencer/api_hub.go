package sequencer

import (
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/surge-run/surge/internal/api"
)

// Hub holds the lease long polls, output long polls and streams waiting
// on groups, fed by the engine's notes (engine.Options.Notify →
// Hub.Notify). A waiter registers before it reads the group, so a note
// between the read and the wait is not missed. It also records when each
// benchmark group's output became durable (the "sequenced" stage), which
// only the note can tell: the machine never sees the fsync.
type Hub struct {
	mu     sync.Mutex
	max, n int
	ready  map[string]map[*waiter]struct{} // lease waiters by group
	output map[string]map[*waiter]struct{} // output waiters by group
	track  map[string]*tracker             // benchmark groups
	// readyGen is closed (and replaced) by every Ready note of a tracked
	// group: every idle benchmark processor wakes, not just one.
	readyGen chan struct{}
	// retry spaces the streams refused at the cap (api.SlotRetry).
	retry api.SlotRetry
}

// waiter is one long poll or stream. An overflow waiter, a long poll past
// the cap (--max-waiters), is in no set, so no note wakes it: it looks
// again every api.OverflowRecheck until its wait passes. A long poll is
// answered within its wait either way, as its client expects, instead of
// a refusal that its retry loop would turn into a storm of polls.
type waiter struct {
	ch       chan struct{}
	overflow bool
}

func (w *waiter) poke() {
	select {
	case w.ch <- struct{}{}:
	default: // it has a wake-up to act on already
	}
}

// NewHub returns a hub for at most max client waiters at once (0: the
// default).
func NewHub(max int) *Hub {
	if max <= 0 {
		max = DefaultMaxWaiters
	}
	return &Hub{max: max, ready: map[string]map[*waiter]struct{}{}, output: map[string]map[*waiter]struct{}{},
		track: map[string]*tracker{}, readyGen: make(chan struct{})}
}

// Notify takes a note of the sequencer workload; it never blocks (it runs
// on the log's completion goroutine).
func (h *Hub) Notify(v any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch n := v.(type) {
	case Ready:
		// As many waiters as there are messages: each takes at least one,
		// and one that finds none left registers again.
		left := n.N
		for w := range h.ready[n.Group] {
			if left <= 0 {
				break
			}
			w.poke()
			left--
		}
		if h.track[n.Group] != nil {
			close(h.readyGen)
			h.readyGen = make(chan struct{})
		}
	case Released:
		for w := range h.output[n.Group] {
			w.poke()
		}
		if t := h.track[n.Group]; t != nil {
			t.add(n.Position, time.Now().UnixNano())
		}
	}
}

// Waiting is how many client waiters are registered.
func (h *Hub) Waiting() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

// add registers a waiter on group in set; past the cap it returns an
// overflow waiter for a long poll, and nil for a stream.
func (h *Hub) add(set map[string]map[*waiter]struct{}, group string, stream bool) *waiter {
	h.mu.Lock()
	defer h.mu.Unlock()
	w := &waiter{ch: make(chan struct{}, 1)}
	if h.n >= h.max {
		if stream {
			return nil
		}
		w.overflow = true
		return w
	}
	s := set[group]
	if s == nil {
		s = map[*waiter]struct{}{}
		set[group] = s
	}
	s[w] = struct{}{}
	h.n++
	return w
}

func (h *Hub) remove(set map[string]map[*waiter]struct{}, group string, w *waiter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := set[group]
	if _, ok := s[w]; !ok {
		return
	}
	delete(s, w)
	if len(s) == 0 {
		delete(set, group)
	}
	h.n--
	h.retry.Released()
}

// refusedMsg words a stream's refusal at the cap; refusedWait is the pause
// its client is given, its own turn for a freed place.
func (h *Hub) refusedMsg() string {
	return "too many clients are waiting (--max-waiters " + strconv.Itoa(h.max) + "); poll instead, or come back after the pause"
}

func (h *Hub) refusedWait() time.Duration { return h.retry.Refused() }

// readyChan is closed at the next Ready note of a benchmark group; taken
// before a processor looks for work, so a note while it looks is not
// missed.
func (h *Hub) readyChan() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.readyGen
}

func (h *Hub) startTracking(group string) *tracker {
	t := &tracker{}
	h.mu.Lock()
	h.track[group] = t
	h.mu.Unlock()
	return t
}

func (h *Hub) stopTracking(group string) {
	h.mu.Lock()
	delete(h.track, group)
	h.mu.Unlock()
}

func (h *Hub) tracked(group string) *tracker {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.track[group]
}

// maxTracked bounds a tracker: one entry per Released note, and a note
// covers every message a completion released, so 2^20 entries cover at
// least that many messages (a benchmark group holds at most
// MaxBenchMessages).
const maxTracked = 1 << 20

// tracker is the durable-release times of one benchmark group: entry i
// says the output reached pos[i] at t[i]. Notes of one group come from
// one partition in apply order, so pos only grows.
type tracker struct {
	mu  sync.Mutex
	pos []uint64
	t   []int64
}

func (t *tracker) add(pos uint64, at int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := len(t.pos); (n > 0 && pos <= t.pos[n-1]) || n >= maxTracked {
		return
	}
	t.pos = append(t.pos, pos)
	t.t = append(t.t, at)
}

// at is when seq was seen durable, or 0 if no note covered it yet.
func (t *tracker) at(seq uint64) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	i, _ := slices.BinarySearch(t.pos, seq)
	if i == len(t.pos) {
		return 0
	}
	return t.t[i]
}
