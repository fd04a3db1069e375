package api

import (
	"net/http"
	"testing"
	"time"
)

// A release hands its slot to the head of the room and wakes it only
// once the room's lock is free: waking under the lock kept every other
// arrival and release of a crowd waiting (and parking on the mutex)
// behind the scheduler's work. The waiter's channel is unbuffered here,
// so the release stays inside its wake until the test receives: the lock
// must be free meanwhile.
func TestReleaseWakesWaiterOutsideTheLock(t *testing.T) {
	l := newInflightLimiter(http.NotFoundHandler(), 1, nil, time.Minute, 10)
	if !l.tryTake() {
		t.Fatal("the only slot is taken")
	}
	wt := &waiter{ready: make(chan struct{})}
	l.mu.Lock()
	l.push(wt)
	l.mu.Unlock()

	released := make(chan struct{})
	go func() {
		defer close(released)
		l.release()
	}()
	awaitCond(t, "the slot handed to the waiter", func() bool { return l.queued.Load() == 0 })
	deadline := time.Now().Add(hang)
	for !l.mu.TryLock() {
		if time.Now().After(deadline) {
			<-wt.ready // let the release finish
			<-released
			t.Fatal("the room's lock stayed held while the waiter was woken")
		}
		time.Sleep(time.Millisecond)
	}
	l.mu.Unlock()
	<-wt.ready
	<-released
	if !wt.granted {
		t.Error("the waiter was woken without its slot")
	}
	if n := l.n.Load(); n != 1 {
		t.Errorf("slots taken = %d, want 1 (the waiter's)", n)
	}
}
