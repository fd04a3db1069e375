package wal

import (
	"bytes"
	"fmt"
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
		l.Append(entry(), func(_, _ cmdlog.Position, err error) {
			if err != nil {
				t.Errorf("append %d: %v", i, err)
			}
			close(dones[i])
		})
		if i < n-1 {
			// Fewer bytes than the first commit: each must still wait.
			stillWaiting(t, dones[0], fmt.Sprintf("%d of %d records were committed before they made a commit as large as the last one", i+1, n))
		}
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

// waitAnHour starts e's wait of an hour for an append of had bytes; the
// channel closes when it ends.
func waitAnHour(e *earlyCommit, had int) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		e.wait(time.Hour, had)
		close(done)
	}()
	return done
}

// stillWaiting fails the test if done closes within 20 ms. A bound the
// other way round cannot fail a correct wait, only miss a wrong one on a
// host stalled that long.
func stillWaiting(t *testing.T, done <-chan struct{}, why string) {
	t.Helper()
	select {
	case <-done:
		t.Fatal(why)
	case <-time.After(20 * time.Millisecond):
	}
}

// The target is the largest of the last recentCommits commits: an old
// large one stops holding appends back once that many smaller ones came
// after it.
func TestEarlyCommitForgetsOldCommits(t *testing.T) {
	e := newEarlyCommit()
	e.committed(10_000)
	for range recentCommits - 1 {
		e.committed(100)
	}
	held := waitAnHour(e, 100)
	stillWaiting(t, held, "a 100-byte append did not wait with a 10,000-byte commit among the recent ones")
	e.appended(9_900)
	waitDone(t, held, "the wait once 9,900 more bytes were queued")
	e.taken(9_900)

	e.committed(100) // the 10,000-byte commit leaves the window
	waitDone(t, waitAnHour(e, 100), "a 100-byte append once the recent commits were all of 100 bytes")
}

// A wake-up left in the channel by an appender that saw the previous
// wait's target does not end the next wait early.
func TestEarlyCommitIgnoresAStaleWake(t *testing.T) {
	e := newEarlyCommit()
	e.committed(1_000)
	e.wake <- struct{}{}
	done := waitAnHour(e, 100)
	stillWaiting(t, done, "a stale wake-up ended a wait with 100 of 1,000 bytes queued")
	e.appended(900)
	waitDone(t, done, "the wait once 900 more bytes were queued")
}
