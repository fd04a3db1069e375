package sequencer

import (
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/surge-run/surge/internal/waiters"
)

// Hub holds the lease long polls, output long polls and streams waiting
// on groups, fed by the engine's notes (engine.Options.Notify →
// Hub.Notify); the registry (package waiters) caps them at
// --max-waiters. It also records when each benchmark group's output
// became durable (the "sequenced" stage), which only the note can tell:
// the machine never sees the fsync.
type Hub struct {
	waiters *waiters.Registry[waitKey, struct{}]
	mu      sync.Mutex
	track   map[string]*tracker // benchmark groups
	// readyGen is closed (and replaced) by every Ready note of a tracked
	// group: every idle benchmark processor wakes, not just one.
	readyGen chan struct{}
}

// waitKey names what a waiter waits for: a group's messages to lease
// (output false) or its released output.
type waitKey struct {
	group  string
	output bool
}

func readyKey(group string) waitKey  { return waitKey{group: group} }
func outputKey(group string) waitKey { return waitKey{group: group, output: true} }

type waiter = waiters.Waiter[struct{}]

// NewHub returns a hub for at most max client waiters at once (0: the
// default).
func NewHub(max int) *Hub {
	if max <= 0 {
		max = DefaultMaxWaiters
	}
	return &Hub{waiters: waiters.New[waitKey, struct{}](max), track: map[string]*tracker{}, readyGen: make(chan struct{})}
}

// Notify takes a note of the sequencer workload; it never blocks (it runs
// on the log's completion goroutine).
func (h *Hub) Notify(v any) {
	switch n := v.(type) {
	case Ready:
		// As many waiters as there are messages: each takes at least one,
		// and one that finds none left registers again.
		h.waiters.WakeN(readyKey(n.Group), struct{}{}, max(n.N, 0))
		h.mu.Lock()
		if h.track[n.Group] != nil {
			close(h.readyGen)
			h.readyGen = make(chan struct{})
		}
		h.mu.Unlock()
	case Released:
		h.waiters.Wake(outputKey(n.Group), struct{}{})
		h.mu.Lock()
		if t := h.track[n.Group]; t != nil {
			t.add(n.Position, time.Now().UnixNano())
		}
		h.mu.Unlock()
	}
}

// Waiting is how many client waiters are registered.
func (h *Hub) Waiting() int { return h.waiters.Waiting() }

// refusedMsg words a stream's refusal at the cap; its client is given
// the pause h.waiters.RefusedWait, its own turn for a freed place.
func (h *Hub) refusedMsg() string {
	return "too many clients are waiting (--max-waiters " + strconv.Itoa(h.waiters.Max()) + "); poll instead, or come back after the pause"
}

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
