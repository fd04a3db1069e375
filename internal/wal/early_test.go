package wal

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/surge-run/surge/internal/cmdlog"
)

// A bound far above anything these tests should take, so that a wait
// that should have ended early fails the test instead of hanging it;
// the interval they set is an hour.
const earlyWatchdog = time.Minute

func waitDone(t *testing.T, done <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(earlyWatchdog):
		t.Fatalf("%s: still waiting after %v, with the sync interval at an hour", what, earlyWatchdog)
	}
}

// A caller that appends one record at a time, each after the last is
// durable (a seed script, a client with one connection), is a closed loop
// of one: nobody else is coming, so its appends must not wait out the
// interval.
func TestSequentialAppendsDoNotWaitOutTheInterval(t *testing.T) {
	l := openLog(t, Options{Partitions: 1, SealDelay: -1, Dir: t.TempDir(), NoSync: true, SyncInterval: time.Hour})
	defer closeLog(t, l)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 50 {
			appendWait(t, l, []cmdlog.Entry{{Data: bytes.Repeat([]byte{byte(i)}, 100)}})
		}
	}()
	waitDone(t, done, "50 sequential appends")
}

// Appends that add up to less than the largest recent commit wait for the
// interval (an open stream of appends keeps its shared fsyncs); the
// append that makes them as large commits them all at once.
func TestAppendsWaitForACommitAsLargeAsTheLargestRecent(t *testing.T) {
	var mu sync.Mutex
	var commits []int
	l := openLog(t, Options{Partitions: 1, SealDelay: -1, Dir: t.TempDir(), NoSync: true, SyncInterval: time.Hour,
		OnSync: func(_ time.Duration, records, _ int) { mu.Lock(); commits = append(commits, records); mu.Unlock() }})
	defer closeLog(t, l)
	entry := func() []cmdlog.Entry { return []cmdlog.Entry{{Data: bytes.Repeat([]byte{'x'}, 100)}} }

	const n = 10
	first := make([]cmdlog.Entry, n)
	for i := range first {
		first[i] = entry()[0]
	}
	appendWait(t, l, first) // no commit before it: not held back

	dones := make([]chan struct{}, n)
	for i := range dones {
		dones[i] = make(chan struct{})
		if i == n-1 {
			// Fewer bytes than the first commit so far: none may have
			// been committed. (20 ms cannot fail a right writer, only
			// miss a wrong one on a host stalled that long.)
			time.Sleep(20 * time.Millisecond)
			mu.Lock()
			early := len(commits) - 1
			mu.Unlock()
			if early != 0 {
				t.Fatalf("%d of %d records were committed before they made a commit as large as the last one", n-1, n)
			}
		}
		l.Append(entry(), func(_, _ cmdlog.Position, err error) {
			if err != nil {
				t.Errorf("append %d: %v", i, err)
			}
			close(dones[i])
		})
	}
	for i := range dones {
		waitDone(t, dones[i], "the append that completes the batch")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(commits) != 2 || commits[1] != n {
		t.Fatalf("commits carried %v records, want [%d %d]", commits, n, n)
	}
}
