package jobs

import "time"

// SetClock makes the registry read time from now (tests drive it by hand).
func (h *Hub) SetClock(now func() time.Time) {
	h.mu.Lock()
	h.now = now
	h.mu.Unlock()
}
