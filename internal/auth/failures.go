package auth

import (
	"sync"
	"sync/atomic"
	"time"
)

const (
	// MaxAuthFailures is how many failed authentications (no token, or
	// an unknown one) a client address may make per AuthFailureWindow;
	// past it every call from the address that needs a token gets 429
	// until the window ends, before its token is even hashed.
	MaxAuthFailures = 20
	// AuthFailureWindow is the window MaxAuthFailures counts in.
	AuthFailureWindow = time.Minute
	// maxTrackedAddrs bounds the addresses remembered: past it the
	// oldest windows are forgotten first, when they have ended.
	maxTrackedAddrs = 100_000
)

// Failures counts failed authentications per client address.
type Failures struct {
	max    int
	window time.Duration
	now    func() time.Time
	// blocked is how many addresses are over the limit, so the common
	// case (none) costs one atomic load and no lock.
	blocked atomic.Int64
	mu      sync.Mutex
	byAddr  map[string]*failureWindow
}

type failureWindow struct {
	start time.Time
	n     int
}

// NewFailures limits each address to max failures per window.
func NewFailures(max int, window time.Duration) *Failures {
	return &Failures{max: max, window: window, now: time.Now, byAddr: map[string]*failureWindow{}}
}

// Blocked reports whether addr is over the limit and, if so, when its
// window ends.
func (f *Failures) Blocked(addr string) (retry time.Duration, blocked bool) {
	if f.blocked.Load() == 0 {
		return 0, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	w := f.byAddr[addr]
	if w == nil || w.n <= f.max {
		return 0, false
	}
	left := w.start.Add(f.window).Sub(f.now())
	if left <= 0 {
		f.forgetLocked(addr, w)
		return 0, false
	}
	return left, true
}

// Fail counts one failure of addr.
func (f *Failures) Fail(addr string) {
	now := f.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	w := f.byAddr[addr]
	if w != nil && now.Sub(w.start) >= f.window {
		f.forgetLocked(addr, w)
		w = nil
	}
	if w == nil {
		if len(f.byAddr) >= maxTrackedAddrs {
			f.pruneLocked(now)
		}
		w = &failureWindow{start: now}
		// A substring of the request's RemoteAddr would keep it alive.
		f.byAddr[string([]byte(addr))] = w
	}
	w.n++
	if w.n == f.max+1 {
		f.blocked.Add(1)
	}
}

func (f *Failures) forgetLocked(addr string, w *failureWindow) {
	if w.n > f.max {
		f.blocked.Add(-1)
	}
	delete(f.byAddr, addr)
}

// pruneLocked forgets every ended window, or if none has ended (an
// attack from more addresses than are tracked) every window under the
// limit, so blocked addresses stay blocked.
func (f *Failures) pruneLocked(now time.Time) {
	for a, w := range f.byAddr {
		if now.Sub(w.start) >= f.window {
			f.forgetLocked(a, w)
		}
	}
	if len(f.byAddr) < maxTrackedAddrs {
		return
	}
	for a, w := range f.byAddr {
		if w.n <= f.max {
			delete(f.byAddr, a)
		}
	}
}
