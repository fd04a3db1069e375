package api

import (
	"math"
	"sync"
	"time"
)

// MaxSlotRetry bounds the pause a SlotRetry asks for: a client told to
// come back later than this would rather give up, and the release rate
// it was derived from will have changed by then anyway.
const MaxSlotRetry = time.Minute

// OverflowRecheck is how often a long poll past --max-waiters, which no
// note wakes, looks again: it still answers within its wait, at most
// this late, instead of being refused.
const OverflowRecheck = time.Second

// SlotRetry tells the clients refused by a full set of slots (the long
// poll and stream hubs' --max-waiters) when to come back. It learns how
// often a slot is freed and gives each refusal its own turn, one release
// interval after the previous refusal's: refused clients come back about
// one per freed slot, spread out, instead of together a fixed second
// later to be refused again. While no release has been seen the interval
// is MinRetryDelay. The zero value is ready to use.
type SlotRetry struct {
	mu      sync.Mutex
	last    time.Time     // the last release
	every   time.Duration // smoothed time between releases; 0: not learnt yet
	next    time.Time     // the latest turn handed out
	nowFunc func() time.Time
}

func (s *SlotRetry) now() time.Time {
	if s.nowFunc != nil {
		return s.nowFunc()
	}
	return time.Now()
}

// Released records that a slot was freed.
func (s *SlotRetry) Released() {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if !s.last.IsZero() {
		gap := now.Sub(s.last)
		if s.every == 0 {
			s.every = gap
		} else {
			s.every += (gap - s.every) / 4
		}
	}
	s.last = now
}

// ReleasedMany records n slots freed since the last record, for a caller
// that counts releases itself because a call per release would be a lock
// every core takes (the connection tracker: a connection goes idle with
// every request). The interval learnt is the time since the last record
// over n.
func (s *SlotRetry) ReleasedMany(n uint64) {
	if n == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if !s.last.IsZero() {
		gap := now.Sub(s.last) / time.Duration(min(n, math.MaxInt64))
		if s.every == 0 {
			s.every = gap
		} else {
			s.every += (gap - s.every) / 4
		}
	}
	s.last = now
}

// Refused is the pause for a client refused now: its turn, one release
// interval after the last turn handed out (or after now), at most
// MaxSlotRetry away.
func (s *SlotRetry) Refused() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	every := max(s.every, time.Millisecond)
	if s.every == 0 {
		every = MinRetryDelay
	}
	turn := now
	if s.next.After(now) {
		turn = s.next
	}
	turn = turn.Add(every)
	if turn.Sub(now) > MaxSlotRetry {
		turn = now.Add(MaxSlotRetry)
	}
	s.next = turn
	return turn.Sub(now)
}
