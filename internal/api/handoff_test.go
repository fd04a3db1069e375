package api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"sync"
	"syscall"
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

// BenchmarkWaitingRoomCrowd: crowd goroutines pass the room at once, 64
// slots, each holding its slot for a yield. cpu-ns/req is the process's
// CPU time (user and system) per request: the room's cost, where ns/op
// also counts the time the 2 cores sat idle.
func BenchmarkWaitingRoomCrowd(b *testing.B) {
	for _, crowd := range []int{1000, 10000} {
		b.Run(strconv.Itoa(crowd), func(b *testing.B) {
			l := newInflightLimiter(nil, 64, nil, time.Hour, 1<<20)
			next := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { runtime.Gosched() })
			per := b.N/crowd + 1
			start := make(chan struct{})
			var ready, done sync.WaitGroup
			for range crowd {
				ready.Add(1)
				done.Add(1)
				go func() {
					defer done.Done()
					ctx, cancel := context.WithCancel(context.Background())
					defer cancel()
					r := httptest.NewRequest("POST", "/x", nil).WithContext(ctx)
					ready.Done()
					<-start
					for range per {
						l.serve(nil, r, next)
					}
				}()
			}
			ready.Wait()
			before := cpuTime(b)
			b.ResetTimer()
			close(start)
			done.Wait()
			b.StopTimer()
			if n := l.refused.Load(); n != 0 {
				b.Fatalf("%d requests refused", n)
			}
			b.ReportMetric(float64(cpuTime(b)-before)/float64(crowd*per), "cpu-ns/req")
		})
	}
}

func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
